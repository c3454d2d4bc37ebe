package apiserver

import (
	"fmt"
	"os"
	"testing"

	"kollect.dev/testenv"
)

// agentBin is kollect-agent, built once for the package as `make build` builds it.
var agentBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kollect-apiserver-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	built, err := testenv.BuildCommands(dir, "", "./agent/cmd/kollect-agent")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = built[0]
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
