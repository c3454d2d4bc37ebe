package hubcmd

import (
	"testing"

	"kollect.dev/agent/internal/cli/clitest"
)

func golden(t *testing.T, name, got string) { t.Helper(); clitest.Golden(t, name, got) }
