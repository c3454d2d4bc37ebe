package sinktest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var shellBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// DocCommand returns the one command line of the ```sh blocks of docs/sinks/<page> that
// contains marker: the documented read a test runs as written, so that the page cannot drift
// from what the sink stores.
func DocCommand(t testing.TB, page, marker string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "docs", "sinks", page))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, block := range shellBlock.FindAllStringSubmatch(string(raw), -1) {
		for _, line := range strings.Split(block[1], "\n") {
			if strings.Contains(line, marker) {
				found = append(found, strings.TrimSpace(line))
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/sinks/%s: %d sh lines contain %q, want exactly one: %q", page, len(found), marker, found)
	}
	return found[0]
}

// DocFile returns docs/<path> (such as "examples/snapshot-s3.yaml"), for tests that apply a
// documented example to a real server.
func DocFile(t testing.TB, path string) []byte {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "docs", filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Shell runs a command line with bash (pipefail: a failing reader is not hidden by jq) in dir,
// with env added to the test's environment, and returns its standard output.
func Shell(t testing.TB, dir string, env []string, line string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, stderr.String())
	}
	return stdout.String()
}

// repoRoot is the nearest directory above the test's working directory holding go.work. The
// sink wing imports nothing of the project's test harness (see backends' leaf test), so it
// finds the root itself.
func repoRoot() (string, error) {
	start, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := start; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work in %s or above it", start)
		}
		dir = parent
	}
}
