// Package version holds the version of Kollect a binary was built from, shared by every
// binary of the project (kollect-agent, kollect-hub, kollect) so that one -ldflags setting
// stamps them all:
//
//	go build -ldflags "-X kollect.dev/api/version.stamped=$(hack/version.sh)" ./agent/cmd/... ./hub/cmd/...
//
// make build, the demo, the e2e suites and e2e/kind-fleet (whose images the charts run) stamp
// it; the agent reports it to the hub, whose version-skew view compares it across the fleet.
// It lives in the api module because the agent and the hub share nothing else.
package version

import "runtime/debug"

// stamped is set at link time; see the package doc.
var stamped = ""

// Unstamped is what String returns for a binary built without the -ldflags setting (go run,
// a plain go build inside the workspace).
const Unstamped = "dev"

// LDFlag returns the -X linker flag that stamps v into a binary.
func LDFlag(v string) string { return "-X kollect.dev/api/version.stamped=" + v }

// String returns the stamped version; without one, the module version from the build info
// (a binary installed with go install …@v1.2.3); else Unstamped.
func String() string {
	if stamped != "" {
		return stamped
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return Unstamped
}
