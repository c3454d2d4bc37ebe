// Package release tests how users receive the product, before any cluster is involved: the
// images `make images` builds (no Docker daemon), the release pipeline's build steps and its
// workflow file.
//
//   - The images are reproducible: hack/release.sh build, run again from the same commit, gives
//     the same image digests and SBOMs as `make images` (KOLLECT_IMAGES) did.
//   - Each image is what docs/releases.md promises, read from the OCI layout itself: linux/amd64
//     and linux/arm64, a static binary of the right machine as entrypoint, a non-root user, a CA
//     bundle, OCI annotations with source, revision and version, an SPDX SBOM attached as an
//     OCI referrer that lists the modules linked into the binary.
//   - The packaged charts' default image is the published one, and a digest pins it by value.
//   - .github/workflows/release.yml passes actionlint (with shellcheck on its scripts), and a
//     broken copy of it does not: the lint can fail.
//
// That the images run, as pods with the charts' security context on a real node, is tested by
// e2e/node.
package release
