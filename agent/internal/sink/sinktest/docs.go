package sinktest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"kollect.dev/testenv"
)

var shellBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// DocCommand returns the one command line of the ```sh blocks of docs/sinks/<page> that
// contains marker: the documented read a test runs as written, so that the page cannot drift
// from what the sink stores.
func DocCommand(t testing.TB, page, marker string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
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
