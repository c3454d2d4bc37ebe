package proto

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestTypeScriptCompiles type-checks the TypeScript that `make generate` writes to web/src/gen
// for the dashboard, with the TypeScript compiler web/package-lock.json pins.
func TestTypeScriptCompiles(t *testing.T) {
	tsc, err := filepath.Abs("../web/node_modules/.bin/tsc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tsc); err != nil {
		t.Fatalf("%s is missing: run make generate (it installs web/'s pinned tools with npm ci)", tsc)
	}
	cmd := exec.Command(tsc, "-p", ".")
	cmd.Dir = "../web"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsc: %v\n%s", err, out)
	}
}
