package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// toolsDir is KOLLECT_TOOLS, or else what hack/ensure-tools.sh prints (building the tools when
// the cache is cold), so that a plain `go test` works too.
var toolsDir = sync.OnceValues(func() (string, error) {
	if dir := os.Getenv("KOLLECT_TOOLS"); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(root, "hack", "ensure-tools.sh")).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("KOLLECT_TOOLS is not set and hack/ensure-tools.sh failed: %w\n%s", err, ee.Stderr)
		}
		return "", fmt.Errorf("KOLLECT_TOOLS is not set and hack/ensure-tools.sh failed: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
})

// Tool returns the path of a test tool built by hack/ensure-tools.sh (helm, kubeconform,
// shellcheck).
func Tool(name string) (string, error) {
	dir, err := toolsDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("KOLLECT_TOOLS=%s lacks %s: %w (rerun hack/ensure-tools.sh)", dir, name, err)
	}
	return p, nil
}
