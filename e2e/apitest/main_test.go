package apitest

import (
	"fmt"
	"os"
	"testing"

	"kollect.dev/testenv"
)

var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	var err error
	cp, err = testenv.Start("apitest", testenv.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := cp.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}
