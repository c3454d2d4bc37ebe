// Package helmrelease decodes Helm's release Secrets (type helm.sh/release.v1) into the small
// document KollectProfiles with decode: HelmRelease read, with the standard library only: the
// agent does not link the Helm library (its size, issue #21).
//
// Helm 3 and 4 store each revision of a release as a Secret sh.helm.release.v1.<name>.v<rev>
// whose data.release is base64(gzip(JSON release)) — base64 once more in the API's Secret
// data. The decoded document keeps the release's identity, chart, status and revision, and
// its values only when asked for, redacted; the manifest, templates, hooks, notes and chart
// files are never kept. Errors name what was malformed, never what it held.
package helmrelease
