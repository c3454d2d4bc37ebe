package gitrepo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// TestCommitsNameTheirWriter, over smart HTTP: every export commit names the agent version
// and instance as trailers, which the git command line reads back; no document names them
// (only the inventory's writer file, rewritten only in commits that change the inventory), so
// an upgraded agent exporting the same snapshot (after a restart: new cache, full diff) makes
// no commit. Git keeps no state to confirm: the sink is no sink.Confirmer.
func TestCommitsNameTheirWriter(t *testing.T) {
	ctx := context.Background()
	name := uniqueRepo("writer")
	if _, err := gitServer.InitBareRepo(name); err != nil {
		t.Fatal(err)
	}
	url := gitServer.URL + "/" + name
	creds := map[string][]byte{"username": []byte(user), "password": []byte(pass)}
	v1 := export.Writer{Version: "v0.1.0", Instance: "kollect-system@4f9c"}
	s := newSink(t, "east", url, v1alpha1.LayoutPerResource, creds)
	if _, ok := any(s).(sink.Confirmer); ok {
		t.Fatal("the git sink confirms: history would record confirmations")
	}
	e := &exporter{sink: s, writer: v1}
	rows := []export.Row{pod(t, "east", "shop", "web", 3), pod(t, "east", "ops", "probe", 1)}
	first := e.export(t, ctx, rows...)
	if first.Commit.IsZero() {
		t.Fatal("the first export made no commit")
	}
	dir := clone(t, strings.Replace(url, "http://", "http://"+user+":"+pass+"@", 1))
	trailers := func() string {
		t.Helper()
		return git(t, dir, "log", "-1", "--format=%(trailers:key=Kollect-Agent-Version,key=Kollect-Agent-Instance)")
	}
	if got, want := trailers(), "Kollect-Agent-Version: v0.1.0\nKollect-Agent-Instance: kollect-system@4f9c"; got != want {
		t.Fatalf("trailers %q, want %q\nmessage:\n%s", got, want, git(t, dir, "log", "-1", "--format=%B"))
	}
	if all := git(t, dir, "log", "-1", "--format=%(trailers)"); !strings.Contains(all, "Kollect-Checksum: "+e.prev.Checksum) {
		t.Errorf("the writer trailers broke the trailer block:\n%s", all)
	}
	const writerFile = "east/workloads.writer.json"
	for _, f := range strings.Fields(git(t, dir, "ls-files")) {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		names := strings.Contains(string(raw), v1.Instance) || strings.Contains(string(raw), v1.Version)
		if names != (f == writerFile) {
			t.Errorf("%s names the writer: %t, want %t:\n%s", f, names, f == writerFile, raw)
		}
	}

	v2 := export.Writer{Version: "v0.2.0", Instance: v1.Instance}
	upgraded := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutPerResource, creds), writer: v2}
	if again := upgraded.export(t, ctx, rows...); !again.Commit.IsZero() {
		t.Fatalf("the upgraded agent committed the same snapshot: %s", again.Commit)
	}
	git(t, dir, "pull", "-q", "--ff-only")
	if head := git(t, dir, "rev-parse", "HEAD"); head != first.Commit.String() {
		t.Fatalf("HEAD moved to %s after the upgraded agent's export of the same snapshot", head)
	}

	rows[0] = pod(t, "east", "shop", "web", 4)
	if changed := upgraded.export(t, ctx, rows...); changed.Commit.IsZero() {
		t.Fatal("a changed row made no commit")
	}
	git(t, dir, "pull", "-q", "--ff-only")
	if got, want := trailers(), "Kollect-Agent-Version: v0.2.0\nKollect-Agent-Instance: kollect-system@4f9c"; got != want {
		t.Fatalf("after the upgraded agent's change: trailers %q, want %q", got, want)
	}
}
