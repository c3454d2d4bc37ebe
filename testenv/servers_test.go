package testenv

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

func TestPostgresStartsAndServesQueries(t *testing.T) {
	pg, err := StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	url, err := pg.CreateDatabase(context.Background(), "probe")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("psql", url, "-tAc", "select current_database()").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "probe" {
		t.Fatalf("psql: %v: %s", err, out)
	}
}

func TestGitHTTPServesClonesAndPushes(t *testing.T) {
	g, err := StartGitHTTP("u", "p")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	if _, err := g.InitBareRepo("inv.git"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	url := strings.Replace(g.URL, "http://", "http://u:p@", 1) + "/inv.git"
	if out, err := exec.Command("git", "clone", "-q", url, dir).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v: %s", err, out)
	}
	// Without credentials git must fail at once rather than ask on the terminal (the harness
	// sets GIT_TERMINAL_PROMPT=0 for every test process).
	if out, err := exec.Command("git", "clone", "-q", g.URL+"/inv.git", t.TempDir()).CombinedOutput(); err == nil {
		t.Fatalf("clone without credentials succeeded: %s", out)
	} else if !strings.Contains(string(out), "terminal prompts disabled") && !strings.Contains(string(out), "Authentication failed") {
		t.Errorf("clone without credentials failed for another reason: %s", out)
	}
}
