package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
)

// testPreviews checks the preview contract: a preview reads back as created, answers are
// taken only from clusters it asked and only before it expires (a second answer replaces the
// first), and expired previews are deleted with their answers.
func testPreviews(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := store.Preview{ID: "pv-1", Bundle: "base", RequestedBy: "token:ops", Manifests: "kind: KollectProfile\n",
		MaxSamples: 3, Clusters: []string{"alpha", "beta"}, NotConnected: []string{"gamma"}, CreatedAt: t0,
		Deadline: t0.Add(10 * time.Second), ExpiresAt: t0.Add(store.PreviewTTL)}
	must(t, s.CreatePreview(ctx, p))
	if err := s.CreatePreview(ctx, p); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second preview with the same ID: %v", err)
	}
	got, err := s.GetPreview(ctx, "pv-1")
	must(t, err)
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("preview read back as %+v, want %+v", got, p)
	}
	if _, err := s.GetPreview(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown preview: %v", err)
	}
	none := store.Preview{ID: "pv-2", CreatedAt: t0, Deadline: t0.Add(time.Second), ExpiresAt: t0.Add(time.Minute)}
	must(t, s.CreatePreview(ctx, none))
	if got, err := s.GetPreview(ctx, "pv-2"); err != nil || len(got.Clusters) != 0 || len(got.NotConnected) != 0 {
		t.Fatalf("preview asking nobody: %+v %v", got, err)
	}

	answer := func(id, cluster, result string, at time.Time) error {
		return s.RecordPreviewAnswer(ctx, store.PreviewAnswer{PreviewID: id, Cluster: cluster, Result: result, ReceivedAt: at})
	}
	if answers, err := s.PreviewAnswers(ctx, "pv-1"); err != nil || len(answers) != 0 {
		t.Fatalf("answers before any: %v %v", answers, err)
	}
	must(t, answer("pv-1", "beta", `{"cluster":"beta"}`, t0.Add(time.Second)))
	must(t, answer("pv-1", "alpha", `{"cluster":"alpha"}`, t0.Add(2*time.Second)))
	must(t, answer("pv-1", "beta", `{"cluster":"beta","error":"again"}`, t0.Add(3*time.Second)))
	if err := answer("pv-1", "gamma", `{}`, t0.Add(time.Second)); !errors.Is(err, store.ErrNotAsked) {
		t.Fatalf("answer of a cluster not asked: %v", err)
	}
	if err := answer("nope", "alpha", `{}`, t0.Add(time.Second)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("answer to an unknown preview: %v", err)
	}
	if err := answer("pv-1", "alpha", `{}`, t0.Add(store.PreviewTTL)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("answer at expiry: %v", err)
	}
	answers, err := s.PreviewAnswers(ctx, "pv-1")
	must(t, err)
	want := []store.PreviewAnswer{
		{PreviewID: "pv-1", Cluster: "alpha", Result: `{"cluster":"alpha"}`, ReceivedAt: t0.Add(2 * time.Second)},
		{PreviewID: "pv-1", Cluster: "beta", Result: `{"cluster":"beta","error":"again"}`, ReceivedAt: t0.Add(3 * time.Second)},
	}
	if !reflect.DeepEqual(answers, want) {
		t.Fatalf("answers %+v, want %+v", answers, want)
	}

	// pv-2 expires first: deleting at its expiry keeps pv-1 and its answers.
	n, err := s.DeleteExpiredPreviews(ctx, t0.Add(time.Minute))
	must(t, err)
	if n != 1 {
		t.Fatalf("deleted %d previews at pv-2's expiry, want 1", n)
	}
	if _, err := s.GetPreview(ctx, "pv-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("pv-2 after its expiry: %v", err)
	}
	if answers, err := s.PreviewAnswers(ctx, "pv-1"); err != nil || len(answers) != 2 {
		t.Fatalf("pv-1's answers after pv-2 was deleted: %v %v", answers, err)
	}
	n, err = s.DeleteExpiredPreviews(ctx, t0.Add(store.PreviewTTL))
	must(t, err)
	if n != 1 {
		t.Fatalf("deleted %d previews at pv-1's expiry, want 1", n)
	}
	if answers, err := s.PreviewAnswers(ctx, "pv-1"); err != nil || len(answers) != 0 {
		t.Fatalf("answers of a deleted preview: %v %v", answers, err)
	}
	if err := answer("pv-1", "alpha", `{}`, t0.Add(time.Second)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("answer to a deleted preview: %v", err)
	}
	// A preview is not configuration: the epoch never moved.
	if e, err := s.ConfigEpoch(ctx); err != nil || e != 0 {
		t.Fatalf("config epoch after previews: %d %v", e, err)
	}
}
