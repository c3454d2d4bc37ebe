package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
)

// testHoldAndStable: a held revision reaches nobody, and clusters registering or relabelled
// meanwhile get the stable revision.
func testHoldAndStable(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "tok", 0, time.Hour, false)
	_, err := register(s, "tok", "prod-1", "c1", map[string]string{"env": "prod"}, false)
	must(t, err)
	_, _, _, err = s.CreateRevision(ctx, revision("base", "a: 1\n", `{"env":"prod"}`), "", false, matchAll)
	must(t, err)
	r2, created, selected, err := s.CreateRevision(ctx, revision("base", "a: 2\n", `{}`), "", true, matchAll)
	must(t, err)
	if !created || r2.Revision != 2 || len(selected) != 1 || selected[0] != "prod-1" {
		t.Fatalf("held revision: %+v created=%v selected=%v", r2, created, selected)
	}
	if d := desiredOf(t, s, "prod-1"); d["base"] != 1 {
		t.Fatalf("a held revision moved prod-1: %v", d)
	}
	b, err := s.GetBundle(ctx, "base")
	must(t, err)
	if b.LatestRevision != 2 || b.StableRevision != 1 || b.ActiveRolloutID != 0 {
		t.Fatalf("bundle after hold: %+v", b)
	}
	// A new cluster gets the stable revision, with the stable revision's selector: rev 2
	// would select dev, rev 1 does not.
	_, err = register(s, "tok", "prod-2", "c2", map[string]string{"env": "prod"}, false)
	must(t, err)
	_, err = register(s, "tok", "dev-1", "c3", map[string]string{"env": "dev"}, false)
	must(t, err)
	if d := desiredOf(t, s, "prod-2"); d["base"] != 1 {
		t.Fatalf("prod-2 desired: %v", d)
	}
	if d := desiredOf(t, s, "dev-1"); len(d) != 0 {
		t.Fatalf("dev-1 desired: %v", d)
	}
	// Releasing without hold makes it stable and sends it everywhere it selects.
	_, created, _, err = s.CreateRevision(ctx, revision("base", "a: 2\n", `{}`), "", false, matchAll)
	must(t, err)
	if created {
		t.Fatal("releasing the held content created a revision")
	}
	if d := desiredOf(t, s, "dev-1"); d["base"] != 2 {
		t.Fatalf("dev-1 after release: %v", d)
	}
	if b, _ := s.GetBundle(ctx, "base"); b.StableRevision != 2 {
		t.Fatalf("stable after release: %+v", b)
	}
	// A bundle only ever applied with hold is released to nobody.
	_, _, _, err = s.CreateRevision(ctx, revision("quiet", "q", `{}`), "", true, matchAll)
	must(t, err)
	must(t, s.SetClusterLabels(ctx, "dev-1", map[string]string{"env": "dev", "x": "y"}, matchAll))
	if d := desiredOf(t, s, "dev-1"); d["quiet"] != 0 || d["base"] != 2 {
		t.Fatalf("dev-1 after relabel: %v", d)
	}
}

func newRollout(bundle string, from, to int64) store.Rollout {
	return store.Rollout{Bundle: bundle, FromRevision: from, ToRevision: to, Strategy: `{}`, Phase: store.PhaseProgressing,
		Waves:     []store.RolloutWave{{Name: "canary", Total: 1, Pending: 1}, {Name: "wave 1", Total: 2, Pending: 2}},
		CreatedBy: "token:ci", CreatedAt: t0}
}

func testRollouts(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "tok", 0, time.Hour, false)
	for _, n := range []string{"a", "b", "c"} {
		_, err := register(s, "tok", n, "cred-"+n, map[string]string{"env": "prod"}, false)
		must(t, err)
	}
	_, _, _, err := s.CreateRevision(ctx, revision("base", "a: 1\n", `{"env":"prod"}`), "", false, matchAll)
	must(t, err)
	_, _, _, err = s.CreateRevision(ctx, revision("base", "a: 2\n", `{"env":"prod"}`), "", true, matchAll)
	must(t, err)

	clusters := []store.RolloutCluster{{Cluster: "a", Wave: 0, State: store.ClusterPending},
		{Cluster: "b", Wave: 1, State: store.ClusterPending}, {Cluster: "c", Wave: 1, State: store.ClusterPending}}
	r, err := s.CreateRollout(ctx, newRollout("base", 1, 2), clusters, nil)
	must(t, err)
	if r.ID == 0 || r.Version != 1 {
		t.Fatalf("created rollout: %+v", r)
	}
	// One active rollout per bundle, and no release without hold meanwhile.
	var active *store.ActiveRolloutError
	if _, err := s.CreateRollout(ctx, newRollout("base", 1, 2), nil, nil); !errors.As(err, &active) ||
		active.RolloutID != r.ID || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second active rollout: %v", err)
	}
	if _, _, _, err := s.CreateRevision(ctx, revision("base", "a: 3\n", `{}`), "", false, matchAll); !errors.As(err, &active) {
		t.Fatalf("release during a rollout: %v", err)
	}
	if _, _, _, err := s.CreateRevision(ctx, revision("base", "a: 3\n", `{}`), "", true, matchAll); err != nil {
		t.Fatalf("held revision during a rollout: %v", err)
	}
	if b, _ := s.GetBundle(ctx, "base"); b.ActiveRolloutID != r.ID || b.StableRevision != 1 {
		t.Fatalf("bundle during rollout: %+v", b)
	}

	// A step: move the canary, write its row and an audit event.
	moved := r
	moved.CurrentWave, moved.UpdatedAt = 0, t0.Add(time.Second)
	moved.Waves[0].StartedAt = t0.Add(time.Second)
	epoch0, _ := s.ConfigEpoch(ctx)
	canary := store.RolloutCluster{Cluster: "a", State: store.ClusterApplying, MovedAt: t0.Add(time.Second),
		Baseline: store.Baseline{Observed: true, ItemCounts: map[string]int64{"ns/inv": 40}, SinkErrors: []string{"KollectDatabaseSink/ns/pg"}}}
	r2, err := s.ApplyRolloutStep(ctx, store.RolloutStep{Rollout: moved, Clusters: []store.RolloutCluster{canary},
		Move: []string{"a"}, Audit: []store.AuditEvent{{Actor: "hub", Action: "RolloutWaveStarted", Target: "rollout/1"}}}, matchAll)
	must(t, err)
	if r2.Version != 2 {
		t.Fatalf("version after step: %d", r2.Version)
	}
	if epoch, _ := s.ConfigEpoch(ctx); epoch <= epoch0 {
		t.Fatal("moving clusters did not move the config epoch")
	}
	if d := desiredOf(t, s, "a"); d["base"] != 2 {
		t.Fatalf("canary desired: %v", d)
	}
	if d := desiredOf(t, s, "b"); d["base"] != 1 {
		t.Fatalf("b moved too early: %v", d)
	}
	// The same (stale) version loses.
	if _, err := s.ApplyRolloutStep(ctx, store.RolloutStep{Rollout: moved}, matchAll); !errors.Is(err, store.ErrStale) {
		t.Fatalf("stale step: %v", err)
	}
	got, err := s.GetRollout(ctx, r.ID)
	must(t, err)
	if got.Version != 2 || !got.Waves[0].StartedAt.Equal(t0.Add(time.Second)) || got.Waves[1].Total != 2 || got.Strategy != `{}` {
		t.Fatalf("stored rollout: %+v", got)
	}
	cs, err := s.RolloutClusters(ctx, r.ID)
	must(t, err)
	if len(cs) != 3 || cs[0].State != store.ClusterApplying || cs[0].Baseline.ItemCounts["ns/inv"] != 40 ||
		len(cs[0].Baseline.SinkErrors) != 1 || !cs[0].MovedAt.Equal(t0.Add(time.Second)) || cs[1].State != store.ClusterPending {
		t.Fatalf("rollout clusters: %+v", cs)
	}
	if ev, _ := s.ListAudit(ctx, 0, 1); len(ev) != 1 || ev[0].Action != "RolloutWaveStarted" {
		t.Fatalf("audit of the step: %+v", ev)
	}

	// Relabelling keeps a moved cluster on the target and an unmoved one on the stable revision.
	must(t, s.SetClusterLabels(ctx, "a", map[string]string{"env": "prod", "zone": "1"}, matchAll))
	must(t, s.SetClusterLabels(ctx, "b", map[string]string{"env": "prod", "zone": "1"}, matchAll))
	if da, db := desiredOf(t, s, "a"), desiredOf(t, s, "b"); da["base"] != 2 || db["base"] != 1 {
		t.Fatalf("after relabelling: a %v, b %v", da, db)
	}

	// A cluster that registers now gets the stable revision; the completing step hands it the
	// target because it is not in the rollout, and drops a deleted cluster's row.
	_, err = register(s, "tok", "late", "cred-late", map[string]string{"env": "prod"}, false)
	must(t, err)
	if d := desiredOf(t, s, "late"); d["base"] != 1 {
		t.Fatalf("late joiner: %v", d)
	}
	must(t, s.DeleteCluster(ctx, "c"))
	done := r2
	done.Phase, done.UpdatedAt = store.PhaseCompleted, t0.Add(time.Minute)
	r3, err := s.ApplyRolloutStep(ctx, store.RolloutStep{Rollout: done, Move: []string{"b", "c"}, Remove: []string{"c"}}, matchAll)
	must(t, err)
	if r3.FinishedAt.IsZero() {
		t.Fatal("completion did not set finished_at")
	}
	for _, n := range []string{"a", "b", "late"} {
		if d := desiredOf(t, s, n); d["base"] != 2 {
			t.Fatalf("%s after completion: %v", n, d)
		}
	}
	if b, _ := s.GetBundle(ctx, "base"); b.StableRevision != 2 || b.ActiveRolloutID != 0 {
		t.Fatalf("bundle after completion: %+v", b)
	}
	if cs, _ := s.RolloutClusters(ctx, r.ID); len(cs) != 2 {
		t.Fatalf("clusters after removal: %+v", cs)
	}

	// A rollback supersedes the old rollout in the same transaction.
	old := r3
	old.Phase, old.UpdatedAt = store.PhaseSuperseded, t0.Add(2*time.Minute)
	back := newRollout("base", 2, 1)
	back.RollbackOf = r.ID
	rb, err := s.CreateRollout(ctx, back, []store.RolloutCluster{{Cluster: "a", State: store.ClusterPending}}, &old)
	must(t, err)
	if rb.ID <= r.ID || rb.RollbackOf != r.ID {
		t.Fatalf("rollback: %+v", rb)
	}
	if o, _ := s.GetRollout(ctx, r.ID); o.Phase != store.PhaseSuperseded || o.Version != r3.Version+1 {
		t.Fatalf("superseded: %+v", o)
	}
	// A stale supersede changes nothing.
	if _, err := s.CreateRollout(ctx, newRollout("other", 0, 1), nil, &old); !errors.Is(err, store.ErrStale) {
		t.Fatalf("stale supersede: %v", err)
	}

	list, err := s.ListRollouts(ctx, store.RolloutFilter{Bundle: "base"})
	must(t, err)
	if len(list) != 2 || list[0].ID != rb.ID {
		t.Fatalf("history: %+v", list)
	}
	if act, _ := s.ListRollouts(ctx, store.RolloutFilter{ActiveOnly: true}); len(act) != 1 || act[0].ID != rb.ID {
		t.Fatalf("active: %+v", act)
	}
	if one, _ := s.ListRollouts(ctx, store.RolloutFilter{Limit: 1}); len(one) != 1 {
		t.Fatalf("limit: %+v", one)
	}
	if _, err := s.GetRollout(ctx, 999); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown rollout: %v", err)
	}

	// Deleting the bundle aborts its active rollout.
	must(t, s.DeleteBundle(ctx, "base"))
	if a, _ := s.GetRollout(ctx, rb.ID); a.Phase != store.PhaseAborted || a.FinishedAt.IsZero() {
		t.Fatalf("rollout of a deleted bundle: %+v", a)
	}
}

// testRolloutRaces: of concurrent writers of one rollout version, or of concurrent starts of
// rollouts of one bundle, exactly one wins — what lets every hub replica run the engine.
func testRolloutRaces(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, _, _, err := s.CreateRevision(ctx, revision("base", "a: 1\n", `{}`), "", false, matchAll)
	must(t, err)
	const racers = 8
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		won, lost, other int
		first            store.Rollout
	)
	tally := func(err error, loss error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			won++
		case errors.Is(err, loss):
			lost++
		default:
			other++
			t.Errorf("unexpected: %v", err)
		}
	}
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.CreateRollout(ctx, newRollout("base", 1, 1), nil, nil)
			if err == nil {
				first = r
			}
			tally(err, store.ErrConflict)
		}()
	}
	wg.Wait()
	if won != 1 || lost != racers-1 {
		t.Fatalf("concurrent starts: %d won, %d refused", won, lost)
	}
	won, lost = 0, 0
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := first
			next.Message = fmt.Sprintf("writer %d", i)
			_, err := s.ApplyRolloutStep(ctx, store.RolloutStep{Rollout: next}, matchAll)
			tally(err, store.ErrStale)
		}()
	}
	wg.Wait()
	if won != 1 || lost != racers-1 {
		t.Fatalf("concurrent steps of one version: %d won, %d lost", won, lost)
	}
	if r, _ := s.GetRollout(ctx, first.ID); r.Version != first.Version+1 {
		t.Fatalf("version after the race: %d", r.Version)
	}
}

// testLargeRollout: a rollout's rows and a step's moves, written in statements of a few
// hundred rows, are every row once, whatever the statement boundaries; a row written twice in
// one step is written as its last version.
func testLargeRollout(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 1301 // three statements of rollout rows, two of desired revisions
	bootstrap(t, s, "tok", 0, time.Hour, false)
	names := make([]string, n)
	clusters := make([]store.RolloutCluster, n)
	for i := range n {
		names[i] = fmt.Sprintf("c-%04d", i)
		_, err := register(s, "tok", names[i], "cred-"+names[i], map[string]string{"env": "prod"}, false)
		must(t, err)
		clusters[i] = store.RolloutCluster{Cluster: names[i], Wave: i % 2, State: store.ClusterPending,
			Baseline: store.Baseline{Observed: true, ItemCounts: map[string]int64{"ns/inv": int64(i)}}}
	}
	_, _, _, err := s.CreateRevision(ctx, revision("big", "a: 1\n", `{"env":"prod"}`), "", false, matchAll)
	must(t, err)
	_, _, _, err = s.CreateRevision(ctx, revision("big", "a: 2\n", `{"env":"prod"}`), "", true, matchAll)
	must(t, err)
	r, err := s.CreateRollout(ctx, newRollout("big", 1, 2), clusters, nil)
	must(t, err)
	rows, err := s.RolloutClusters(ctx, r.ID)
	must(t, err)
	if len(rows) != n || rows[n-1].Cluster != names[n-1] || rows[n-1].Baseline.ItemCounts["ns/inv"] != n-1 {
		t.Fatalf("%d rollout rows, want %d (last %+v)", len(rows), n, rows[len(rows)-1])
	}
	// Every cluster moves in one step; the first one's row comes twice, the last version wins.
	moved := r
	moved.UpdatedAt = t0.Add(time.Second)
	step := make([]store.RolloutCluster, 0, n+1)
	for _, c := range clusters {
		c.State, c.MovedAt = store.ClusterApplying, t0.Add(time.Second)
		step = append(step, c)
	}
	again := step[0]
	again.Message = "the later version"
	step = append(step, again)
	_, err = s.ApplyRolloutStep(ctx, store.RolloutStep{Rollout: moved, Clusters: step, Move: names}, matchAll)
	must(t, err)
	rows, err = s.RolloutClusters(ctx, r.ID)
	must(t, err)
	for _, c := range rows {
		if c.State != store.ClusterApplying {
			t.Fatalf("row %s is %s after the step", c.Cluster, c.State)
		}
	}
	if rows[0].Message != "the later version" {
		t.Fatalf("a row written twice in a step kept %q", rows[0].Message)
	}
	for _, name := range []string{names[0], names[n/2], names[n-1]} {
		if d := desiredOf(t, s, name); d["big"] != 2 {
			t.Fatalf("%s desires %v after the step", name, d)
		}
	}
}
