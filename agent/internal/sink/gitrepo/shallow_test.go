package gitrepo

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// commitAsOthers makes n commits on main of the test server's repository, each adding a file
// of another cluster, with the git command line in a work clone, as other agents would.
func commitAsOthers(t *testing.T, work, cluster string, n int) {
	t.Helper()
	git(t, work, "pull", "-q", "--ff-only")
	for i := range n {
		path := filepath.Join(work, cluster, "workloads", fmt.Sprintf("f%03d.yaml", i))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(fmt.Sprintf("n: %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		git(t, work, "add", ".")
		git(t, work, "-c", "user.name=other", "-c", "user.email=o@example.com", "commit", "-q", "-m", fmt.Sprintf("%s %d", cluster, i))
	}
	git(t, work, "push", "-q", "origin", "main")
}

// commitObjects counts the commit objects in a repository directory, loose and packed.
func commitObjects(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, typ := range strings.Fields(git(t, dir, "cat-file", "--batch-all-objects", "--batch-check=%(objecttype)")) {
		if typ == "commit" {
			n++
		}
	}
	return n
}

// TestMirrorFetchesOnlyTheTip, over smart HTTP: in a repository where other clusters made 40
// commits, the agent's mirror holds the tip it fetched and the commit it made, not the
// history; after 5 more commits by others, one more fetched tip. Its pushes still fast-forward
// and keep the others' commits (git log of the bare repository), and when someone moves the
// branch back to a commit older than anything the mirror fetched, the next export builds on
// that commit.
func TestMirrorFetchesOnlyTheTip(t *testing.T) {
	ctx := context.Background()
	name := uniqueRepo("shallow")
	if _, err := gitServer.InitBareRepo(name); err != nil {
		t.Fatal(err)
	}
	authURL := strings.Replace(gitServer.URL, "http://", "http://"+user+":"+pass+"@", 1) + "/" + name
	work := clone(t, authURL)
	commitAsOthers(t, work, "west", 40)
	old := bareGit(t, name, "rev-parse", "main~30")

	s := newSink(t, "east", gitServer.URL+"/"+name, v1alpha1.LayoutPerResource, map[string][]byte{"username": []byte(user), "password": []byte(pass)})
	mirrorDir := filepath.Join(s.env.CacheDir, "mirror.git")
	e := &exporter{sink: s}
	first := e.export(t, ctx, pod(t, "east", "shop", "web", 1))
	if n := commitObjects(t, mirrorDir); n != 2 {
		t.Fatalf("the mirror holds %d commits after the first export, want 2 (the tip and the export's)", n)
	}
	if got := bareGit(t, name, "rev-list", "--count", "main"); got != strconv.Itoa(1+40+1) {
		t.Fatalf("main has %s commits, want 42", got)
	}

	commitAsOthers(t, work, "north", 5)
	second := e.export(t, ctx, pod(t, "east", "shop", "web", 2))
	if n := commitObjects(t, mirrorDir); n != 4 {
		t.Fatalf("the mirror holds %d commits after the second export, want 4", n)
	}
	if parent := bareGit(t, name, "rev-parse", second.Commit.String()+"^"); parent != bareGit(t, name, "rev-parse", "main~1") {
		t.Fatal("the second export is not on the tip")
	}
	if got := bareGit(t, name, "rev-list", "--count", "main"); got != strconv.Itoa(1+40+1+5+1) {
		t.Fatalf("main has %s commits, want 48", got)
	}
	if !strings.Contains(bareGit(t, name, "rev-list", "main"), first.Commit.String()) {
		t.Fatal("the first export's commit is not on main")
	}
	if merges := bareGit(t, name, "rev-list", "--merges", "main"); merges != "" {
		t.Fatalf("merge commits: %s", merges)
	}

	// Someone resets main to a commit the mirror never fetched.
	bareGit(t, name, "update-ref", "refs/heads/main", old)
	third := e.export(t, ctx, pod(t, "east", "shop", "web", 3))
	if parent := bareGit(t, name, "rev-parse", third.Commit.String()+"^"); parent != old {
		t.Fatalf("after the reset the export's parent is %s, want %s", parent, old)
	}
	if files := bareGit(t, name, "ls-tree", "-r", "--name-only", "main", "east/"); files != "east/workloads/shop/Deployment/web.yaml" {
		t.Fatalf("after the reset east holds %q", files)
	}
}

// TestShallowListStaysShort: each fetch of another agent's tip adds a shallow boundary to the
// mirror; after 2*maxShallow of them the list holds at most maxShallow (the boundaries the
// mirror's refs still reach), and exports go on building on the tip.
func TestShallowListStaysShort(t *testing.T) {
	ctx := context.Background()
	name := uniqueRepo("shallow-list")
	if _, err := gitServer.InitBareRepo(name); err != nil {
		t.Fatal(err)
	}
	authURL := strings.Replace(gitServer.URL, "http://", "http://"+user+":"+pass+"@", 1) + "/" + name
	work := clone(t, authURL)
	s := newSink(t, "east", gitServer.URL+"/"+name, v1alpha1.LayoutPerResource, map[string][]byte{"username": []byte(user), "password": []byte(pass)})
	e := &exporter{sink: s}
	for i := range 2 * maxShallow {
		commitAsOthers(t, work, fmt.Sprintf("o%02d", i), 1)
		res := e.export(t, ctx, pod(t, "east", "shop", "web", i))
		if parent := bareGit(t, name, "rev-parse", res.Commit.String()+"^"); parent != bareGit(t, name, "rev-parse", "main~1") {
			t.Fatalf("export %d is not on the tip", i)
		}
	}
	raw, err := os.ReadFile(filepath.Join(s.env.CacheDir, "mirror.git", "shallow"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(raw))); n == 0 || n > maxShallow {
		t.Fatalf("the shallow list holds %d commits after %d fetches, want 1..%d", n, 2*maxShallow, maxShallow)
	}
	if got := bareGit(t, name, "rev-list", "--count", "main"); got != strconv.Itoa(1+4*maxShallow) {
		t.Fatalf("main has %s commits, want %d", got, 1+4*maxShallow)
	}
}

// TestFullMirrorIsStartedShallow: a mirror an earlier version cloned in full (all history, no
// shallow list) is started afresh as a shallow one when the sink opens, so its history is
// never walked again; the export then holds the tip and its own commit.
func TestFullMirrorIsStartedShallow(t *testing.T) {
	ctx := context.Background()
	name := uniqueRepo("full-mirror")
	if _, err := gitServer.InitBareRepo(name); err != nil {
		t.Fatal(err)
	}
	authURL := strings.Replace(gitServer.URL, "http://", "http://"+user+":"+pass+"@", 1) + "/" + name
	commitAsOthers(t, clone(t, authURL), "west", 20)
	cache := t.TempDir()
	if out, err := exec.Command("git", "clone", "-q", "--bare", authURL, filepath.Join(cache, "mirror.git")).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v: %s", err, out)
	}
	if n := commitObjects(t, filepath.Join(cache, "mirror.git")); n != 21 {
		t.Fatalf("the full mirror holds %d commits, want 21", n)
	}
	secret := map[string][]byte{"username": []byte(user), "password": []byte(pass)}
	env := sink.Env{Cluster: "east", Namespace: "kollect", Name: "repo", CacheDir: cache, Log: logr.Discard(),
		Secrets: sinktest.Secrets(map[string]map[string][]byte{"git-creds": secret})}
	cfg := &v1alpha1.GitSinkConfig{URL: gitServer.URL + "/" + name, Branch: "main", SecretRef: &v1alpha1.SecretReference{Name: "git-creds"}}
	s, err := Open(ctx, cfg, v1alpha1.Serialization{}, v1alpha1.Layout{Mode: v1alpha1.LayoutPerResource}, env, "oauth2")
	if err != nil {
		t.Fatal(err)
	}
	e := &exporter{sink: s}
	e.export(t, ctx, pod(t, "east", "shop", "web", 1))
	if n := commitObjects(t, filepath.Join(cache, "mirror.git")); n != 2 {
		t.Fatalf("the mirror holds %d commits after the export, want 2 (the tip and the export's)", n)
	}
}
