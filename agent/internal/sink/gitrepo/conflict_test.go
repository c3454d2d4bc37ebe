package gitrepo

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// bareGit runs the git command line on a repository of the test server, read directly on
// disk: what the branch holds, independent of any transport.
func bareGit(t *testing.T, name string, args ...string) string {
	t.Helper()
	return git(t, filepath.Join(gitServer.Root, name), args...)
}

// TestSecondWriterIsRefused, over smart HTTP: two agents export the same cluster name with
// different instances. The second, within the conflict window of the first's last commit, is
// refused with a *sink.WriterConflictError and the branch does not move (git log of the bare
// repository); it leaves a contender mark outside the branch, which the first reports with a
// *sink.ContendedError at its next commit. Once the first has not committed for the window,
// the second takes over, and the first is refused in turn. The clock is the batches'
// exportedAt, stepped by the test.
func TestSecondWriterIsRefused(t *testing.T) {
	ctx := context.Background()
	name := uniqueRepo("second-writer")
	if _, err := gitServer.InitBareRepo(name); err != nil {
		t.Fatal(err)
	}
	url := gitServer.URL + "/" + name
	creds := map[string][]byte{"username": []byte(user), "password": []byte(pass)}
	const window = 10 * time.Minute
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	first := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutPerResource, creds), window: window, at: t0,
		writer: export.Writer{Version: "v0.3.0", Instance: "kollect@aaaa"}}
	second := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutPerResource, creds), window: window,
		writer: export.Writer{Version: "v0.3.0", Instance: "kollect@bbbb"}}
	first.export(t, ctx, pod(t, "east", "shop", "web", 1))
	history := bareGit(t, name, "log", "--format=%H %s", "main")

	second.at = t0.Add(time.Minute)
	_, err := second.try(ctx, pod(t, "east", "shop", "other", 7))
	var conflict *sink.WriterConflictError
	if !errors.Is(err, sink.ErrWriterConflict) || !errors.As(err, &conflict) {
		t.Fatalf("the second writer's export: %v, want a writer conflict", err)
	}
	if conflict.Holder != first.writer || !conflict.HolderLastWrite.Equal(t0) || conflict.Self != second.writer || conflict.Window != window {
		t.Errorf("conflict %+v", conflict)
	}
	if got := bareGit(t, name, "log", "--format=%H %s", "main"); got != history {
		t.Fatalf("the refused export moved the branch:\n%s\nwas:\n%s", got, history)
	}
	mark := bareGit(t, name, "log", "-1", "--format=%(trailers:key=Kollect-Contender-Instance,valueonly)", "refs/kollect/contenders/east/workloads")
	if mark != second.writer.Instance {
		t.Fatalf("contender mark names %q, want %s", mark, second.writer.Instance)
	}
	// A retry replaces the mark: one ref, one parentless commit, however often it is refused.
	second.at = t0.Add(2 * time.Minute)
	if _, err := second.try(ctx, pod(t, "east", "shop", "other", 7)); !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the second writer's retry: %v", err)
	}
	if n := bareGit(t, name, "rev-list", "--count", "refs/kollect/contenders/east/workloads"); n != "1" {
		t.Fatalf("the mark ref has %s commits, want 1", n)
	}

	first.at = t0.Add(3 * time.Minute)
	res, err := first.try(ctx, pod(t, "east", "shop", "web", 2))
	var contended *sink.ContendedError
	if !errors.As(err, &contended) || contended.Contender != second.writer || res.Commit.IsZero() {
		t.Fatalf("the holder's export after the refusal: %v (commit %s), want a contended success", err, res.Commit)
	}
	holder := readWriterFile(t, name)
	if holder.Writer != first.writer || !holder.WrittenAt.Equal(first.at) {
		t.Fatalf("writer file %+v", holder)
	}

	// The first stops; a window after its last commit, the second takes over.
	second.at = first.at.Add(window)
	taken, err := second.try(ctx, pod(t, "east", "shop", "other", 7))
	if err != nil || taken.Commit.IsZero() {
		t.Fatalf("takeover: %v (commit %s)", err, taken.Commit)
	}
	if files := bareGit(t, name, "ls-tree", "-r", "--name-only", "main"); !strings.Contains(files, "east/workloads/shop/Deployment/other.yaml") ||
		strings.Contains(files, "web.yaml") {
		t.Fatalf("after the takeover the branch holds:\n%s", files)
	}
	if holder := readWriterFile(t, name); holder.Writer != second.writer {
		t.Fatalf("writer file after the takeover %+v", holder)
	}
	first.at = second.at.Add(time.Minute)
	if _, err := first.try(ctx, pod(t, "east", "shop", "web", 3)); !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the first writer after the takeover: %v, want a writer conflict", err)
	}
	if merges := bareGit(t, name, "rev-list", "--merges", "main"); merges != "" {
		t.Fatalf("merge commits: %s", merges)
	}
	if n := bareGit(t, name, "rev-list", "--count", "main"); n != "4" {
		t.Fatalf("%s commits on main, want 4 (initial, first, first's change, takeover)", n)
	}
}

// TestSameInstanceNeverConflicts: a restarted or upgraded agent (same instance, new cache)
// and agents that name no instance write as before, and an export that changes nothing
// leaves the writer file, and its time, as they are.
func TestSameInstanceNeverConflicts(t *testing.T) {
	ctx := context.Background()
	name := uniqueRepo("same-writer")
	if _, err := gitServer.InitBareRepo(name); err != nil {
		t.Fatal(err)
	}
	url := gitServer.URL + "/" + name
	creds := map[string][]byte{"username": []byte(user), "password": []byte(pass)}
	self := export.Writer{Version: "v0.3.0", Instance: "kollect@aaaa"}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	e := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutPerResource, creds), writer: self, at: t0}
	e.export(t, ctx, pod(t, "east", "shop", "web", 1))
	head := bareGit(t, name, "rev-parse", "main")

	restarted := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutPerResource, creds), at: t0.Add(time.Minute),
		writer: export.Writer{Version: "v0.4.0", Instance: self.Instance}}
	if res := restarted.export(t, ctx, pod(t, "east", "shop", "web", 1)); !res.Commit.IsZero() {
		t.Fatalf("the restarted agent committed unchanged data: %s", res.Commit)
	}
	if got := bareGit(t, name, "rev-parse", "main"); got != head {
		t.Fatal("the branch moved")
	}
	if w := readWriterFile(t, name); !w.WrittenAt.Equal(t0) || w.Writer != self {
		t.Fatalf("writer file after an unchanged export %+v", w)
	}
	anonymous := &exporter{sink: newSink(t, "east", url, v1alpha1.LayoutPerResource, creds), at: t0.Add(2 * time.Minute)}
	if res := anonymous.export(t, ctx, pod(t, "east", "shop", "web", 2)); res.Commit.IsZero() {
		t.Fatal("an agent without an instance made no commit")
	}
}

// readWriterFile reads the writer file of east/workloads on main with the git command line.
func readWriterFile(t *testing.T, name string) writerRecord {
	t.Helper()
	var w writerRecord
	raw := bareGit(t, name, "show", "main:east/workloads.writer.json")
	if err := json.Unmarshal([]byte(raw), &w); err != nil {
		t.Fatalf("writer file %q: %v", raw, err)
	}
	return w
}
