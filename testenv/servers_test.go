package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// TestPostgresShutdownLeavesNoProcess: once Shutdown returns, the postmaster and every
// backend are gone (not even zombies: the postmaster reaped them) and so is the directory.
func TestPostgresShutdownLeavesNoProcess(t *testing.T) {
	pg, err := StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{pg.cmd.Process.Pid}
	for i := 0; i < len(pids); i++ { // the group leader (runuser when root), then descendants
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, stat := range stats {
			raw, err := os.ReadFile(stat)
			if err != nil {
				continue
			}
			fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
			if len(fields) > 1 && fields[1] == strconv.Itoa(pids[i]) {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(stat)))
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) < 3 {
		t.Fatalf("found only processes %v of PostgreSQL", pids)
	}
	pg.Shutdown()
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Errorf("process %d of PostgreSQL outlived Shutdown: %s", pid, raw)
		}
	}
	if _, err := os.Stat(pg.Dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", pg.Dir, err)
	}
}
