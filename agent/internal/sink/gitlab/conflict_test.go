package gitlab

import (
	"context"
	"errors"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// TestSecondWriterIsRefused, in both modes against the real git server: a second agent with
// the same cluster name and another instance, within the conflict window of the first's last
// commit, gets a *sink.WriterConflictError; neither the configured branch nor the
// merge-request branch moves, and the refused agent writes nothing to the API. The holder's
// next change succeeds (the merge request follows it) and reports the contender with a
// *sink.ContendedError.
func TestSecondWriterIsRefused(t *testing.T) {
	for _, mode := range []v1alpha1.GitLabMode{v1alpha1.GitLabPush, v1alpha1.GitLabMergeRequest} {
		t.Run(string(mode), func(t *testing.T) { secondWriterIsRefused(t, mode) })
	}
}

func secondWriterIsRefused(t *testing.T, mode v1alpha1.GitLabMode) {
	ctx := context.Background()
	fake := NewFakeGitLab("g/p")
	defer fake.Close()
	repo := uniqueRepo("second-writer")
	if _, err := gitServer.InitBareRepo(repo); err != nil {
		t.Fatal(err)
	}
	const window = 10 * time.Minute
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	holder := export.Writer{Version: "v0.3.0", Instance: "kollect@aaaa"}
	other := export.Writer{Version: "v0.3.0", Instance: "kollect@bbbb"}
	send := func(s *Sink, w export.Writer, at time.Time, prev *export.Snapshot, rows ...export.Row) (*export.Snapshot, error) {
		b, snap := batch(prev, rows...)
		b.Envelope.Writer, b.Envelope.ExportedAt, b.ConflictWindow = w, at, window
		if prev != nil {
			b.PreviousChecksum = prev.Checksum
		}
		return snap, s.Export(ctx, b)
	}
	first := newSink(t, fake, repo, "g/p", mode, token)
	snap, err := send(first, holder, t0, nil, row(t, "web", 1))
	if err != nil {
		t.Fatal(err)
	}
	refs, writes := lsRemote(t, repo), fake.writes

	second := newSink(t, fake, repo, "g/p", mode, token)
	_, err = send(second, other, t0.Add(time.Minute), nil, row(t, "other", 7))
	var conflict *sink.WriterConflictError
	if !errors.As(err, &conflict) || conflict.Holder != holder || conflict.Self != other {
		t.Fatalf("the second writer's export: %v, want a writer conflict", err)
	}
	after := lsRemote(t, repo)
	for _, ref := range []string{"refs/heads/main", "refs/heads/kollect/east/workloads"} {
		if after[ref] != refs[ref] {
			t.Errorf("the refused export moved %s from %q to %q", ref, refs[ref], after[ref])
		}
	}
	if fake.writes != writes {
		t.Error("the refused export wrote to the API")
	}

	_, err = send(first, holder, t0.Add(2*time.Minute), snap, row(t, "web", 2))
	var contended *sink.ContendedError
	if !errors.As(err, &contended) || contended.Contender != other {
		t.Fatalf("the holder's next export: %v, want a contended success", err)
	}
	branch := "refs/heads/main"
	if mode == v1alpha1.GitLabMergeRequest {
		branch = "refs/heads/kollect/east/workloads"
		if mrs := fake.openMRs(); len(mrs) != 1 || fake.writes == writes {
			t.Fatalf("the contended export did not keep the merge request current: %+v", mrs)
		}
	}
	if lsRemote(t, repo)[branch] == refs[branch] {
		t.Fatalf("the holder's contended export did not move %s", branch)
	}
}
