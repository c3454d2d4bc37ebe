package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
)

// testHeartbeatHistory checks which heartbeats become history records (a change other than the
// item count, else one per HistoryInterval), the pruning to HistoryLimit per cluster, and that
// a deleted cluster leaves no history behind for the next cluster of that name.
func testHeartbeatHistory(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "tok", 0, time.Hour, false)
	for _, name := range []string{"alpha", "beta"} {
		_, err := register(s, "tok", name, "cred-"+name, map[string]string{}, false)
		must(t, err)
	}
	if _, err := s.Heartbeats(ctx, "nope", 10); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("history of an unknown cluster: %v", err)
	}
	history := func(name string, limit int) []store.HeartbeatRecord {
		t.Helper()
		recs, err := s.Heartbeats(ctx, name, limit)
		must(t, err)
		return recs
	}
	if h := history("alpha", 10); len(h) != 0 {
		t.Fatalf("history before any heartbeat: %+v", h)
	}
	base := store.HeartbeatRecord{AgentVersion: "v1", AppliedDigest: "sha256:a", Inventories: 2, Items: 50,
		InventoriesNotReady: 1, SinkErrors: 0, State: "online"}
	beat := func(name string, at time.Time, r store.HeartbeatRecord) {
		t.Helper()
		must(t, s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: name, At: at, AgentVersion: r.AgentVersion,
			AppliedDigest: r.AppliedDigest, Status: "{}", Record: r}))
	}
	at := t0.Add(time.Hour)
	first := base
	first.State = "pending"
	beat("alpha", at, first)
	beat("beta", at, first)
	beat("alpha", at.Add(10*time.Second), base) // the state changed: recorded
	beat("alpha", at.Add(20*time.Second), base) // nothing changed: not recorded
	more := base
	more.Items = 51
	beat("alpha", at.Add(30*time.Second), more) // only the item count changed: waits for the minute
	beat("alpha", at.Add(69*time.Second), more) // 59 s after the last record: not recorded
	beat("alpha", at.Add(70*time.Second), more) // a minute after it: recorded, with the new count
	more.Items = 52
	failing := more
	failing.SinkErrors = 1
	beat("alpha", at.Add(75*time.Second), failing) // a sink began failing: recorded at once
	h := history("alpha", 10)
	wantAt := []time.Duration{75 * time.Second, 70 * time.Second, 10 * time.Second, 0}
	if len(h) != len(wantAt) {
		t.Fatalf("history: %+v", h)
	}
	for i, d := range wantAt {
		if !h[i].At.Equal(at.Add(d)) {
			t.Errorf("record %d at %v, want %v", i, h[i].At, at.Add(d))
		}
	}
	if h[1] != (store.HeartbeatRecord{At: at.Add(70 * time.Second), AgentVersion: "v1", AppliedDigest: "sha256:a",
		Inventories: 2, Items: 51, InventoriesNotReady: 1, State: "online"}) || h[0].Items != 52 || h[0].SinkErrors != 1 ||
		h[3].State != "pending" {
		t.Fatalf("records: %+v", h)
	}

	// A busy cluster keeps only the newest HistoryLimit records; the other cluster keeps its own.
	for i := range store.HistoryLimit + 20 {
		r := base
		r.SinkErrors = int64(1000 + i)
		beat("alpha", at.Add(time.Hour+time.Duration(i)*time.Second), r)
	}
	h = history("alpha", store.HistoryLimit+50)
	if len(h) != store.HistoryLimit || h[0].SinkErrors != int64(1000+store.HistoryLimit+19) || h[len(h)-1].SinkErrors != 1020 {
		t.Fatalf("after pruning: %d records, newest %+v, oldest %+v", len(h), h[0], h[len(h)-1])
	}
	if h := history("alpha", 3); len(h) != 3 || h[0].SinkErrors != int64(1000+store.HistoryLimit+19) {
		t.Fatalf("limit 3: %+v", h)
	}
	if h := history("beta", 10); len(h) != 1 || h[0].State != "pending" {
		t.Fatalf("beta: %+v", h)
	}

	must(t, s.DeleteCluster(ctx, "alpha"))
	if _, err := s.Heartbeats(ctx, "alpha", 10); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("history of a deleted cluster: %v", err)
	}
	_, err := register(s, "tok", "alpha", "cred-alpha-2", map[string]string{}, false)
	must(t, err)
	if h := history("alpha", 10); len(h) != 0 {
		t.Fatalf("a new cluster of a deleted one's name inherits %d records", len(h))
	}
}

// testHeartbeatCredentialCheck: a heartbeat carrying the credential its caller checked is
// written while the cluster's row holds exactly that credential, and after a rotation, a
// replacement, a revocation or a deletion writes nothing and answers ErrCredentialChanged.
func testHeartbeatCredentialCheck(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "tok", 0, time.Hour, true)
	_, err := s.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h-tok", Name: "alpha", CredentialHash: "c1",
		Now: t0, CredentialExpiresAt: t0.Add(time.Hour)}, matchAll)
	must(t, err)
	byCred := func(hash string) store.CredentialFacts {
		t.Helper()
		c, err := s.ClusterByCredential(ctx, hash)
		must(t, err)
		return store.CredentialFactsOf(c)
	}
	beat := func(at time.Time, cred store.CredentialFacts) error {
		return s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: at, Status: "{}", Credential: &cred})
	}
	lastBeat := func() time.Time {
		t.Helper()
		c, err := s.GetCluster(ctx, "alpha")
		must(t, err)
		return c.LastHeartbeat
	}
	refused := func(at time.Time, cred store.CredentialFacts, after string) {
		t.Helper()
		before := lastBeat()
		if err := beat(at, cred); !errors.Is(err, store.ErrCredentialChanged) {
			t.Fatalf("a heartbeat checked against the credential before %s: %v, want ErrCredentialChanged", after, err)
		}
		if got := lastBeat(); !got.Equal(before) {
			t.Fatalf("a refused heartbeat after %s was written (last heartbeat %s, was %s)", after, got, before)
		}
	}

	first := byCred("c1")
	must(t, beat(t0.Add(time.Minute), first))
	must(t, beat(t0.Add(2*time.Minute), first)) // the marks of the first one, on PostgreSQL
	if got := lastBeat(); !got.Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("last heartbeat %s after two checked heartbeats", got)
	}

	_, err = s.RotateCredential(ctx, store.Rotation{Cluster: "alpha", PresentedHash: "c1", NewHash: "c2",
		NewExpiresAt: t0.Add(2 * time.Hour), PreviousUntil: t0.Add(10 * time.Minute)})
	must(t, err)
	refused(t0.Add(3*time.Minute), first, "a rotation")
	rotated := byCred("c1") // the previous credential, in its grace period
	must(t, beat(t0.Add(4*time.Minute), rotated))

	_, err = register(s, "tok", "alpha", "c3", map[string]string{}, true)
	must(t, err)
	refused(t0.Add(5*time.Minute), rotated, "a replacement")
	replaced := byCred("c3")
	must(t, beat(t0.Add(6*time.Minute), replaced))

	must(t, s.RevokeCluster(ctx, "alpha"))
	if err := beat(t0.Add(7*time.Minute), replaced); !errors.Is(err, store.ErrCredentialChanged) {
		t.Fatalf("a heartbeat checked against the credential before a revocation: %v, want ErrCredentialChanged", err)
	}
	if err := s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: t0.Add(7 * time.Minute)}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unchecked heartbeat of a revoked cluster: %v, want ErrNotFound", err)
	}
}
