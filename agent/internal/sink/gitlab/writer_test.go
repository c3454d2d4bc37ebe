package gitlab

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// TestMergeRequestCommitsNameTheirWriter: in merge-request mode, the commit on the source
// branch carries the writer trailers (read back with the git command line from the real git
// server); an upgraded agent exporting the same snapshot from a fresh cache pushes nothing
// and writes nothing to the API.
func TestMergeRequestCommitsNameTheirWriter(t *testing.T) {
	ctx := context.Background()
	fake := NewFakeGitLab("g/p")
	defer fake.Close()
	repo := uniqueRepo("writer")
	if _, err := gitServer.InitBareRepo(repo); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, fake, repo, "g/p", v1alpha1.GitLabMergeRequest, token)
	if _, ok := any(s).(sink.Confirmer); ok {
		t.Fatal("the gitlab sink confirms: history would record confirmations")
	}
	v1 := export.Writer{Version: "v0.1.0", Instance: "kollect-system@4f9c"}
	rows := []export.Row{row(t, "web", 1), row(t, "api", 2)}
	b, _ := batch(nil, rows...)
	b.Envelope.Writer = v1
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	branch := "refs/heads/kollect/east/workloads"
	first := lsRemote(t, repo)[branch]
	if first == "" {
		t.Fatal("no merge-request branch")
	}
	dir := t.TempDir()
	url := strings.Replace(gitServer.URL, "http://", "http://"+tokenUser+":"+token+"@", 1) + "/" + repo
	if out, err := exec.Command("git", "clone", "-q", "-b", "kollect/east/workloads", url, dir).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v: %s", err, out)
	}
	out, err := exec.Command("git", "-C", dir, "log", "-1", "--format=%(trailers:key=Kollect-Agent-Version,key=Kollect-Agent-Instance)").CombinedOutput()
	if err != nil {
		t.Fatalf("git log: %v: %s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "Kollect-Agent-Version: v0.1.0\nKollect-Agent-Instance: kollect-system@4f9c"; got != want {
		t.Fatalf("trailers %q, want %q", got, want)
	}

	writes := fake.writes
	upgraded := newSink(t, fake, repo, "g/p", v1alpha1.GitLabMergeRequest, token)
	b, _ = batch(nil, rows...)
	b.Envelope.Writer = export.Writer{Version: "v0.2.0", Instance: v1.Instance}
	if err := upgraded.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	if lsRemote(t, repo)[branch] != first || fake.writes != writes {
		t.Fatal("the upgraded agent's export of the same snapshot pushed or wrote to the API")
	}
}
