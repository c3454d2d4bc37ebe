// Package gitlab is the GitLab snapshot sink: the git sink's behaviour over HTTPS with a
// GitLab token, plus a merge-request mode.
//
// In push mode commits go straight to the configured branch, exactly as with the git sink.
// In mergeRequest mode each cluster and inventory has one stable branch,
// kollect/<cluster>/<inventory>, started from the target branch; every export with changes
// adds a commit on it (never forced) and the sink keeps one open merge request from it to the
// target branch, created when missing and updated in place (title and description follow the
// latest commit). The REST calls go to the documented v4 endpoints under baseURL, with the
// token in the PRIVATE-TOKEN header, so self-hosted GitLab works the same way.
package gitlab
