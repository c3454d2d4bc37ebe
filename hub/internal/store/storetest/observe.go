package storetest

import (
	"context"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
)

// testClusterEpoch checks that the cluster epoch moves with every change of a registration
// (what credential caches rely on to refuse a revoked credential at its next call) and not
// with heartbeats, which would empty every cache every second.
func testClusterEpoch(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "tok", 0, time.Hour, true)
	last, err := s.ClusterEpoch(ctx)
	must(t, err)
	moved := func(what string, want bool) {
		t.Helper()
		e, err := s.ClusterEpoch(ctx)
		must(t, err)
		if got := e != last; got != want {
			t.Fatalf("%s: cluster epoch %d → %d (moved %v, want %v)", what, last, e, got, want)
		}
		last = e
	}
	_, err = register(s, "tok", "alpha", "cred-a", map[string]string{"env": "prod"}, false)
	must(t, err)
	moved("registration", true)
	must(t, s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: t0.Add(time.Minute), Status: "{}"}))
	moved("heartbeat", false)
	must(t, s.SetClusterLabels(ctx, "alpha", map[string]string{"env": "dev"}, matchAll))
	moved("new labels", true)
	_, err = s.RotateCredential(ctx, store.Rotation{Cluster: "alpha", PresentedHash: "cred-a", NewHash: "cred-a2",
		NewExpiresAt: t0.Add(time.Hour), PreviousUntil: t0.Add(2 * time.Minute)})
	must(t, err)
	moved("credential rotation", true)
	_, err = register(s, "tok", "alpha", "cred-a3", nil, true)
	must(t, err)
	moved("replacement", true)
	must(t, s.RevokeCluster(ctx, "alpha"))
	moved("revocation", true)
	must(t, s.ReleaseCluster(ctx, "alpha"))
	moved("release", true)
	must(t, s.DeleteCluster(ctx, "alpha"))
	moved("deletion", true)
}

// testObserve checks the rollout engine's reads: the whole fleet with labels and one bundle's
// desired revision, the named clusters without labels, and stored statuses.
func testObserve(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "tok", 0, time.Hour, false)
	for _, c := range []struct{ name, env string }{{"alpha", "prod"}, {"beta", "dev"}, {"gamma", "prod"}} {
		_, err := register(s, "tok", c.name, "cred-"+c.name, map[string]string{"env": c.env}, false)
		must(t, err)
	}
	_, _, _, err := s.CreateRevision(ctx, revision("base", "a: 1\n", `{"env":"prod"}`), "", false, matchAll)
	must(t, err)
	beat := t0.Add(2 * time.Minute)
	must(t, s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: beat, Status: `{"agentVersion":"v1"}`}))
	must(t, s.RevokeCluster(ctx, "gamma"))

	fleet, err := s.ObserveFleet(ctx, "base")
	must(t, err)
	want := []store.Observed{
		{Name: "alpha", Labels: map[string]string{"env": "prod"}, LastHeartbeat: beat, Desired: 1},
		{Name: "beta", Labels: map[string]string{"env": "dev"}},
		{Name: "gamma", Labels: map[string]string{"env": "prod"}, Revoked: true, Desired: 1},
	}
	if len(fleet) != len(want) {
		t.Fatalf("ObserveFleet: %+v", fleet)
	}
	for i, w := range want {
		g := fleet[i]
		if g.Name != w.Name || g.Labels["env"] != w.Labels["env"] || g.Revoked != w.Revoked || !g.LastHeartbeat.Equal(w.LastHeartbeat) ||
			g.Desired != w.Desired {
			t.Errorf("ObserveFleet[%d] = %+v, want %+v", i, g, w)
		}
	}
	other, err := s.ObserveFleet(ctx, "nope")
	must(t, err)
	if len(other) != 3 || other[0].Desired != 0 {
		t.Fatalf("ObserveFleet of an unknown bundle: %+v", other)
	}

	some, err := s.ObserveClusters(ctx, "base", []string{"alpha", "nope", "gamma"})
	must(t, err)
	byName := map[string]store.Observed{}
	for _, o := range some {
		byName[o.Name] = o
	}
	if len(some) != 2 || byName["alpha"].Desired != 1 || !byName["alpha"].LastHeartbeat.Equal(beat) || byName["alpha"].Labels != nil ||
		!byName["gamma"].Revoked {
		t.Fatalf("ObserveClusters: %+v", some)
	}
	// More names than one query binds.
	many := make([]string, 1200)
	for i := range many {
		many[i] = "alpha"
	}
	many[1100] = "beta"
	got, err := s.ObserveClusters(ctx, "base", many)
	must(t, err)
	if len(got) < 2 {
		t.Fatalf("ObserveClusters of 1,200 names: %+v", got)
	}

	statuses, err := s.ClusterStatuses(ctx, []string{"alpha", "beta", "nope"})
	must(t, err)
	if len(statuses) != 1 || statuses["alpha"] != `{"agentVersion":"v1"}` {
		t.Fatalf("ClusterStatuses: %v", statuses)
	}
}
