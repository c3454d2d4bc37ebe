// Package tools pins the build tools of the project with go.mod tool directives. It lives
// outside go.work on purpose: the tools' dependency graphs (controller-tools, buf, helm …)
// must never change the versions the project's own modules build with. Run a tool with
// `go tool -modfile=hack/tools/go.mod NAME`.
package tools
