package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

var gitServer *testenv.GitHTTP

const user, pass = "agent", "s3cret"

func TestMain(m *testing.M) {
	var err error
	gitServer, err = testenv.StartGitHTTP(user, pass)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	gitServer.Stop()
	os.Exit(code)
}

func attrs(t testing.TB, m map[string]any) []byte {
	raw, err := export.EncodeAttributes(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func pod(t testing.TB, cluster, ns, name string, replicas int) export.Row {
	return export.Row{Origin: &export.Origin{Cluster: cluster, Inventory: "workloads", Target: "deploys", Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: ns, Name: name, UID: cluster + "-" + ns + "-" + name, Attributes: attrs(t, map[string]any{"replicas": replicas, "image": "app:" + name})}
}

// exporter keeps the last accepted snapshot like the agent's delivery worker does, so batches
// carry real diffs.
type exporter struct {
	sink   *Sink
	prev   *export.Snapshot
	gen    int64
	writer export.Writer
	// coverage goes into every envelope: changing it alone makes a coverage-only batch.
	coverage []export.Coverage
	// at is the batch's exportedAt (zero: now) and window its conflict window (zero: the
	// default), for writer tests that step a clock instead of waiting.
	at     time.Time
	window time.Duration
}

func (e *exporter) export(t testing.TB, ctx context.Context, rows ...export.Row) Result {
	t.Helper()
	res, err := e.try(ctx, rows...)
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	return res
}

// try exports like the delivery worker: the snapshot counts as accepted after a success or a
// contended success.
func (e *exporter) try(ctx context.Context, rows ...export.Row) (Result, error) {
	snap := export.NewSnapshot(append([]export.Row(nil), rows...))
	e.gen++
	at := e.at
	if at.IsZero() {
		at = time.Now()
	}
	b := &sink.Batch{
		Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: e.sink.env.Cluster, Inventory: "workloads",
			Generation: e.gen, ExportedAt: at, ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows,
			Writer: e.writer, Coverage: e.coverage},
		Diff:           export.Compute(e.prev, snap),
		ConflictWindow: e.window,
	}
	if e.prev != nil {
		b.PreviousChecksum = e.prev.Checksum
	}
	res, err := e.sink.Publish(ctx, b, e.sink.Branch(), "")
	if err == nil || errors.Is(err, sink.ErrContended) {
		e.prev = snap
	}
	return res, err
}

func newSink(t testing.TB, cluster, url string, mode v1alpha1.LayoutMode, secret map[string][]byte) *Sink {
	t.Helper()
	spec := &v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit,
		Git:    &v1alpha1.GitSinkConfig{URL: url, Branch: "main"},
		Layout: v1alpha1.Layout{Mode: mode}}
	if secret != nil {
		spec.Git.SecretRef = &v1alpha1.SecretReference{Name: "git-creds"}
	}
	env := sink.Env{Cluster: cluster, Namespace: "kollect", Name: "repo", CacheDir: t.TempDir(), Log: logr.Discard(),
		Secrets: sinktest.Secrets(map[string]map[string][]byte{"git-creds": secret})}
	s, err := Open(context.Background(), spec.Git, spec.Serialization, spec.Layout, env, "oauth2")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// git runs the git command line on a clone: the independent reader of what the sink wrote.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func clone(t testing.TB, url string) string {
	dir := t.TempDir()
	if out, err := exec.Command("git", "clone", "-q", "-b", "main", url, dir).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v: %s", err, out)
	}
	return dir
}

func TestPerResourceOverFileCommitsOnlyChanges(t *testing.T) {
	ctx := context.Background()
	repo, err := testenv.InitBareRepo(filepath.Join(t.TempDir(), "inv.git"))
	if err != nil {
		t.Fatal(err)
	}
	url := "file://" + repo
	e := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutPerResource, nil)}
	rows := []export.Row{pod(t, "east", "shop", "web", 3), pod(t, "east", "shop", "api", 2), pod(t, "east", "ops", "probe", 1)}

	first := e.export(t, ctx, rows...)
	if first.Commit.IsZero() {
		t.Fatal("first export made no commit")
	}
	dir := clone(t, url)
	files := strings.Fields(git(t, dir, "ls-files"))
	want := []string{"east/workloads/ops/Deployment/probe.yaml", "east/workloads/shop/Deployment/api.yaml", "east/workloads/shop/Deployment/web.yaml"}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("files %v, want %v", files, want)
	}
	web, _ := os.ReadFile(filepath.Join(dir, want[2]))
	if !strings.Contains(string(web), "replicas: 3") || !strings.Contains(string(web), "name: web") {
		t.Errorf("web document:\n%s", web)
	}

	// Unchanged data: no commit.
	if again := e.export(t, ctx, rows...); !again.Commit.IsZero() {
		t.Fatalf("unchanged snapshot committed %s", again.Commit)
	}
	// A fresh sink (a restarted agent, full diff, new cache) also finds nothing to commit.
	fresh := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutPerResource, nil)}
	if again := fresh.export(t, ctx, rows...); !again.Commit.IsZero() {
		t.Fatalf("restarted sink committed unchanged data %s", again.Commit)
	}

	// One row changes: one commit touching only its document.
	rows[0] = pod(t, "east", "shop", "web", 4)
	changed := e.export(t, ctx, rows...)
	git(t, dir, "pull", "-q", "--ff-only")
	if n := git(t, dir, "rev-list", "--count", first.Commit.String()+"..HEAD"); n != "1" {
		t.Fatalf("%s commits after the change, want 1", n)
	}
	if touched := git(t, dir, "diff", "--name-only", "HEAD~1", "HEAD"); touched != want[2] {
		t.Fatalf("change touched %q, want only %s", touched, want[2])
	}
	msg := git(t, dir, "log", "-1", "--format=%B")
	if !strings.HasPrefix(msg, "kollect: east/workloads (3 items, ") || !strings.Contains(msg, "Rows: 0 added, 1 changed, 0 removed") ||
		!strings.Contains(msg, "Deployment shop/web") || !strings.Contains(msg, "Kollect-Checksum: sha256:") {
		t.Errorf("message:\n%s", msg)
	}
	if changed.Commit.String() != git(t, dir, "rev-parse", "HEAD") {
		t.Errorf("result commit %s is not HEAD", changed.Commit)
	}

	// A row disappears: its document is pruned.
	e.export(t, ctx, rows[0], rows[1])
	git(t, dir, "pull", "-q", "--ff-only")
	if touched := git(t, dir, "diff", "--name-status", "HEAD~1", "HEAD"); touched != "D\t"+want[0] {
		t.Fatalf("prune commit: %q", touched)
	}
	if msg := git(t, dir, "log", "-1", "--format=%B"); !strings.Contains(msg, "0 added, 0 changed, 1 removed") {
		t.Errorf("message:\n%s", msg)
	}

	// A restarted agent (new cache, full diff) renders everything and prunes what the
	// repository holds beyond the snapshot, without touching other files.
	restarted := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutPerResource, nil)}
	restarted.export(t, ctx, rows[0])
	git(t, dir, "pull", "-q", "--ff-only")
	if touched := git(t, dir, "diff", "--name-status", "HEAD~1", "HEAD"); touched != "D\t"+want[1] {
		t.Fatalf("full-render prune: %q", touched)
	}
	if msg := git(t, dir, "log", "-1", "--format=%B"); !strings.Contains(msg, "Full export of 1 rows: 0 documents added, 0 changed, 1 removed.") ||
		!strings.Contains(msg, "Removed:\n  "+want[1]) {
		t.Errorf("message:\n%s", msg)
	}
}

func TestDocumentOverHTTPChangesOnlyTheRowsLines(t *testing.T) {
	ctx := context.Background()
	docRepo := uniqueRepo("doc")
	if _, err := gitServer.InitBareRepo(docRepo); err != nil {
		t.Fatal(err)
	}
	url := gitServer.URL + "/" + docRepo
	e := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutDocument, map[string][]byte{"username": []byte(user), "password": []byte(pass)})}
	var rows []export.Row
	for i := range 50 {
		rows = append(rows, pod(t, "east", "shop", fmt.Sprintf("app-%02d", i), 1))
	}
	e.export(t, ctx, rows...)
	rows[17] = pod(t, "east", "shop", "app-17", 9)
	e.export(t, ctx, rows...)
	authURL := strings.Replace(url, "http://", "http://"+user+":"+pass+"@", 1)
	dir := clone(t, authURL)
	if n := git(t, dir, "rev-list", "--count", "HEAD"); n != "3" {
		t.Fatalf("%s commits, want initial + 2", n)
	}
	diff := git(t, dir, "diff", "-U0", "HEAD~1", "HEAD")
	var changedLines []string
	for _, l := range strings.Split(diff, "\n") {
		if (strings.HasPrefix(l, "+") || strings.HasPrefix(l, "-")) && !strings.HasPrefix(l, "+++") && !strings.HasPrefix(l, "---") {
			changedLines = append(changedLines, l)
		}
	}
	// The checksum line and the row's replicas line, old and new.
	if len(changedLines) != 4 || !strings.Contains(diff, "+    replicas: 9") || !strings.Contains(diff, "+checksum: ") {
		t.Fatalf("diff of one changed row:\n%s", diff)
	}
}

// TestConcurrentClustersKeepLinearHistory: three clusters push to one repository at once,
// over HTTP (git's own receive-pack behind git-http-backend) and over file:// (the agent's
// in-process server, run here with no git program on PATH, as in the agent's image). No
// commit is lost and the history stays linear.
func TestConcurrentClustersKeepLinearHistory(t *testing.T) {
	t.Run("http", func(t *testing.T) {
		sharedRepo := uniqueRepo("shared")
		if _, err := gitServer.InitBareRepo(sharedRepo); err != nil {
			t.Fatal(err)
		}
		url := gitServer.URL + "/" + sharedRepo
		concurrentClusters(t, url, strings.Replace(url, "http://", "http://"+user+":"+pass+"@", 1),
			map[string][]byte{"username": []byte(user), "password": []byte(pass)}, [2]func(){})
	})
	t.Run("file", func(t *testing.T) {
		repo, err := testenv.InitBareRepo(filepath.Join(t.TempDir(), "shared.git"))
		if err != nil {
			t.Fatal(err)
		}
		// The exports run with an empty PATH: a git program the sink ran would not be found.
		path := os.Getenv("PATH")
		withoutGit := func() { os.Setenv("PATH", t.TempDir()) }
		restore := func() { os.Setenv("PATH", path) }
		defer restore()
		concurrentClusters(t, "file://"+repo, "file://"+repo, nil, [2]func(){withoutGit, restore})
	})
}

// concurrentClusters runs three clusters' exports against url at once (between around[0] and
// around[1]), then reads the history back with git through readURL.
func concurrentClusters(t *testing.T, url, readURL string, creds map[string][]byte, around [2]func()) {
	ctx := context.Background()
	const rounds = 6
	var mu sync.Mutex
	var commits []string
	var wg sync.WaitGroup
	retried := 0
	if around[0] != nil {
		around[0]()
	}
	for _, cluster := range []string{"east", "west", "north"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := &exporter{sink: newSink(t, cluster, url, v1alpha1.LayoutPerResource, creds)}
			for i := range rounds {
				res := e.export(t, ctx, pod(t, cluster, "shop", "web", i), pod(t, cluster, "shop", fmt.Sprintf("r%d", i), i))
				mu.Lock()
				commits = append(commits, res.Commit.String())
				retried += res.Attempts - 1
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if around[1] != nil {
		around[1]()
	}
	dir := clone(t, readURL)
	if merges := git(t, dir, "rev-list", "--merges", "HEAD"); merges != "" {
		t.Fatalf("merge commits: %s", merges)
	}
	history := strings.Fields(git(t, dir, "rev-list", "HEAD"))
	if len(history) != 1+3*rounds {
		t.Fatalf("%d commits in history, want %d", len(history), 1+3*rounds)
	}
	inHistory := map[string]bool{}
	for _, h := range history {
		inHistory[h] = true
	}
	for _, c := range commits {
		if !inHistory[c] {
			t.Errorf("commit %s was pushed but is not in the history", c)
		}
	}
	files := strings.Fields(git(t, dir, "ls-files"))
	sort.Strings(files)
	want := []string{}
	for _, c := range []string{"east", "north", "west"} {
		want = append(want, c+"/workloads/shop/Deployment/r5.yaml", c+"/workloads/shop/Deployment/web.yaml")
	}
	sort.Strings(want)
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("files %v, want %v", files, want)
	}
	t.Logf("%d pushes were re-applied after a concurrent push", retried)
}

func TestProbeClassifiesFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	probeRepo := uniqueRepo("probe")
	if _, err := gitServer.InitBareRepo(probeRepo); err != nil {
		t.Fatal(err)
	}
	good := map[string][]byte{"username": []byte(user), "password": []byte(pass)}
	port, _ := testenv.FreePort()
	for _, tc := range []struct {
		name   string
		url    string
		secret map[string][]byte
		class  sink.ErrorClass
	}{
		{"ok", gitServer.URL + "/" + probeRepo, good, ""},
		{"wrong password", gitServer.URL + "/" + probeRepo, map[string][]byte{"username": []byte(user), "password": []byte("nope")}, sink.Terminal},
		{"no credentials", gitServer.URL + "/" + probeRepo, nil, sink.Terminal},
		{"missing repository", gitServer.URL + "/missing.git", good, sink.Terminal},
		{"missing file repository", "file://" + t.TempDir() + "/none.git", nil, sink.Terminal},
		{"unreachable", fmt.Sprintf("http://127.0.0.1:%d/x.git", port), good, sink.Transient},
	} {
		err := newSink(t, "east", tc.url, v1alpha1.LayoutDocument, tc.secret).Probe(ctx)
		switch {
		case tc.class == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.class != "" && (err == nil || sink.ClassOf(err) != tc.class):
			t.Errorf("%s: want a %s error, got %v (%s)", tc.name, tc.class, err, sink.ClassOf(err))
		}
	}
}

func TestPreviewHasNoSideEffects(t *testing.T) {
	s := newSink(t, "east", "https://user:tok@git.example/inv.git", v1alpha1.LayoutPerResource, nil)
	p, err := s.Preview(context.Background(), "east", "workloads")
	if err != nil {
		t.Fatal(err)
	}
	if p.Destination != "https://git.example/inv.git branch main" || len(p.Paths) != 1 ||
		p.Paths[0] != "east/workloads/<namespace>/<kind>/<name>.yaml" || p.Message != "kollect: east/workloads (<itemCount> items, <checksumShort>)" {
		t.Errorf("preview %+v", p)
	}
}

func TestCredentialsFromSecret(t *testing.T) {
	ctx := context.Background()
	env := sink.Env{CacheDir: t.TempDir(), Secrets: func(context.Context, string) (map[string][]byte, error) {
		return map[string][]byte{"token": []byte("glpat-x\n")}, nil
	}}
	c, err := ResolveCredentials(ctx, &v1alpha1.GitSinkConfig{URL: "https://h/x.git", SecretRef: &v1alpha1.SecretReference{Name: "s"}}, env, "oauth2")
	if err != nil || c.Auth.String() != "http-basic-auth - oauth2:*******" {
		t.Fatalf("token auth %v: %v", c.Auth, err)
	}
	_, err = ResolveCredentials(ctx, &v1alpha1.GitSinkConfig{URL: "ssh://git@h/x.git", SecretRef: &v1alpha1.SecretReference{Name: "s"}}, env, "oauth2")
	if sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("ssh remote without a key: %v", err)
	}
	env.Secrets = func(context.Context, string) (map[string][]byte, error) {
		return map[string][]byte{"ca.crt": []byte("not a pem")}, nil
	}
	c, err = ResolveCredentials(ctx, &v1alpha1.GitSinkConfig{URL: "https://h/x.git",
		TLS: &v1alpha1.TLSConfig{CASecretRef: &v1alpha1.SecretKeySelector{Name: "ca", Key: "ca.crt"}}}, env, "oauth2")
	if err != nil || string(c.CABundle) != "not a pem" {
		t.Fatalf("CA bundle %q: %v", c.CABundle, err)
	}
}

var repoCount atomic.Int64

// uniqueRepo names a fresh repository on the shared server, so tests can run repeatedly.
func uniqueRepo(base string) string {
	return fmt.Sprintf("%s-%d.git", base, repoCount.Add(1))
}

// TestEmptyBareRepositoryGetsTheBranch: a repository made with plain `git init --bare` has no
// commits and a HEAD naming master. The first export creates the configured branch (main),
// over file:// and over smart HTTP, and git reads it back.
func TestEmptyBareRepositoryGetsTheBranch(t *testing.T) {
	ctx := context.Background()
	fileRepo := filepath.Join(t.TempDir(), "empty.git")
	httpName := uniqueRepo("empty")
	for _, dir := range []string{fileRepo, filepath.Join(gitServer.Root, httpName)} {
		if out, err := exec.Command("git", "-c", "init.defaultBranch=master", "init", "-q", "--bare", dir).CombinedOutput(); err != nil {
			t.Fatalf("git init --bare: %v: %s", err, out)
		}
		if out, err := exec.Command("git", "-C", dir, "config", "http.receivepack", "true").CombinedOutput(); err != nil {
			t.Fatalf("git config: %v: %s", err, out)
		}
	}
	good := map[string][]byte{"username": []byte(user), "password": []byte(pass)}
	for _, tc := range []struct {
		name, url string
		secret    map[string][]byte
	}{{"file", "file://" + fileRepo, nil}, {"http", gitServer.URL + "/" + httpName, good}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSink(t, "east", tc.url, v1alpha1.LayoutPerResource, tc.secret)
			if err := s.Probe(ctx); err != nil {
				t.Fatalf("probe of an empty repository: %v", err)
			}
			e := &exporter{sink: s}
			if res := e.export(t, ctx, pod(t, "east", "shop", "web", 3)); res.Commit.IsZero() {
				t.Fatal("the first export into an empty repository made no commit")
			}
			url := tc.url
			if tc.secret != nil {
				url = strings.Replace(url, "http://", "http://"+user+":"+pass+"@", 1)
			}
			dir := clone(t, url)
			if n := git(t, dir, "rev-list", "--count", "main"); n != "1" {
				t.Fatalf("branch main has %s commits, want 1", n)
			}
		})
	}
}
