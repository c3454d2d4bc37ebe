package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"kollect.dev/api/version"
)

// RepoRoot returns the repository's root: the directory of the go.work that encloses the
// working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work above the working directory: run the tests inside the repository")
		}
		dir = parent
	}
}

// Version returns the version `make build` stamps into the binaries (hack/version.sh).
func Version() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(root, "hack", "version.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("hack/version.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildCommands builds the given main packages (paths relative to the repository's root, such
// as "./agent/cmd/kollect-agent") into dir exactly as `make build` does, stamped with version
// (empty: what hack/version.sh prints). It returns the binaries' paths in the order given.
func BuildCommands(dir, v string, pkgs ...string) ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if v == "" {
		if v, err = Version(); err != nil {
			return nil, err
		}
	}
	args := append([]string{"build", "-ldflags", "-s -w " + version.LDFlag(v), "-o", dir + "/"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, out.String())
	}
	paths := make([]string, len(pkgs))
	for i, p := range pkgs {
		paths[i] = filepath.Join(dir, filepath.Base(p))
	}
	return paths, nil
}
