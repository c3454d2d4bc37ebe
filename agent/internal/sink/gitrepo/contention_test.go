package gitrepo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// contention is what a fleet's concurrent exports cost: pushes per commit.
type contention struct {
	mu        sync.Mutex
	commits   []string
	attempts  []int // fetch-rebuild-push rounds of each export that committed
	exhausted int   // exports that gave up after maxRounds, retried by the caller
}

func (c *contention) record(res Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commits = append(c.commits, res.Commit.String())
	c.attempts = append(c.attempts, res.Attempts)
}

func (c *contention) summary() string {
	total, most := 0, 0
	for _, a := range c.attempts {
		total += a
		most = max(most, a)
	}
	sorted := slices.Clone(c.attempts)
	slices.Sort(sorted)
	return fmt.Sprintf("%d commits, %.2f retries per commit (attempts - 1), median %d attempts, p90 %d, max %d; %d exports gave up after %d attempts and were sent again",
		len(c.attempts), float64(total-len(c.attempts))/float64(len(c.attempts)), sorted[len(sorted)/2], sorted[len(sorted)*9/10], most, c.exhausted, maxRounds)
}

// TestFleetPushesConverge, over smart HTTP: 20 agents (20 cluster names, each its own sink and
// mirror; $KOLLECT_GIT_FLEET_AGENTS sets another count) export 3 changes each to one branch at
// once, as after a bundle change that makes the whole fleet re-export. Like the delivery
// worker, an export that gives up (transient, after maxRounds rounds) is sent again. Every
// commit lands, history stays linear, each cluster's files are its last export's, and the
// test logs the retries per commit.
func TestFleetPushesConverge(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet of concurrent agents")
	}
	clusters, rounds := 20, 3
	if n, err := strconv.Atoi(os.Getenv("KOLLECT_GIT_FLEET_AGENTS")); err == nil && n > 0 {
		clusters = n // a larger fleet for measurements: docs/sinks/git.md gives 50
	}
	ctx := context.Background()
	name := uniqueRepo("fleet")
	if _, err := gitServer.InitBareRepo(name); err != nil {
		t.Fatal(err)
	}
	url := gitServer.URL + "/" + name
	creds := map[string][]byte{"username": []byte(user), "password": []byte(pass)}
	var c contention
	var wg sync.WaitGroup
	for i := range clusters {
		cluster := fmt.Sprintf("c%02d", i)
		e := &exporter{sink: newSink(t, cluster, url, v1alpha1.LayoutPerResource, creds)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				res, err := exportUntilDone(ctx, e, &c, pod(t, cluster, "shop", "web", r), pod(t, cluster, "shop", fmt.Sprintf("r%d", r), r))
				if err != nil {
					t.Errorf("%s round %d: %v", cluster, r, err)
					return
				}
				c.record(res)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Log(c.summary())
	if merges := bareGit(t, name, "rev-list", "--merges", "main"); merges != "" {
		t.Fatalf("merge commits: %s", merges)
	}
	history := strings.Fields(bareGit(t, name, "rev-list", "main"))
	if len(history) != 1+clusters*rounds {
		t.Fatalf("%d commits on main, want %d", len(history), 1+clusters*rounds)
	}
	for _, commit := range c.commits {
		if !slices.Contains(history, commit) {
			t.Errorf("commit %s was pushed but is not on main", commit)
		}
	}
	files := strings.Fields(bareGit(t, name, "ls-tree", "-r", "--name-only", "main"))
	if len(files) != 2*clusters {
		t.Fatalf("%d files on main, want %d", len(files), 2*clusters)
	}
	for i := range clusters {
		last := fmt.Sprintf("c%02d/workloads/shop/Deployment/r%d.yaml", i, rounds-1)
		if !slices.Contains(files, last) {
			t.Errorf("%s is missing", last)
		}
	}
}

// exportUntilDone sends the export again while it fails transiently, as the delivery worker
// does after its backoff, counting the give-ups.
func exportUntilDone(ctx context.Context, e *exporter, c *contention, rows ...export.Row) (Result, error) {
	for {
		res, err := e.try(ctx, rows...)
		if err == nil || sink.ClassOf(err) != sink.Transient || !strings.Contains(err.Error(), "still rejected") {
			return res, err
		}
		c.mu.Lock()
		c.exhausted++
		c.mu.Unlock()
		e.gen-- // the worker sends the same generation again
	}
}

// TestRejectionWithoutContentionFails: a server that refuses every push (a pre-receive hook,
// as a protected branch would) is not another agent's push: the branch does not move, and
// after maxStuck such rounds the export fails transiently with the server's reason instead of
// going on until its deadline.
func TestRejectionWithoutContentionFails(t *testing.T) {
	ctx := context.Background()
	name := uniqueRepo("hook")
	dir, err := gitServer.InitBareRepo(name)
	if err != nil {
		t.Fatal(err)
	}
	hook := "#!/bin/sh\necho 'protected branch: pushes are refused' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "hooks", "pre-receive"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	head := bareGit(t, name, "rev-parse", "main")
	e := &exporter{sink: newSink(t, "east", gitServer.URL+"/"+name, v1alpha1.LayoutPerResource, map[string][]byte{"username": []byte(user), "password": []byte(pass)})}
	res, err := e.try(ctx, pod(t, "east", "shop", "web", 1))
	if err == nil || sink.ClassOf(err) != sink.Transient || !strings.Contains(err.Error(), "did not move") {
		t.Fatalf("export against a refusing server: %v, want a transient error naming the stuck branch", err)
	}
	if res.Attempts != maxStuck+1 {
		t.Errorf("%d rounds, want %d", res.Attempts, maxStuck+1)
	}
	if got := bareGit(t, name, "rev-parse", "main"); got != head {
		t.Fatal("the branch moved")
	}
	t.Log(err)
}
