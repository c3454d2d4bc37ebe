package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

// behaviour is what a simulated agent reports for the revision of bundle "base" it applied
// (0: none): its inventories and sinks.
type behaviour func(rev int64) ([]*fleetv1.InventoryStatus, []*fleetv1.SinkStatus)

// healthy reports one ready inventory of 100 items and one sink without error.
func healthy(int64) ([]*fleetv1.InventoryStatus, []*fleetv1.SinkStatus) {
	return []*fleetv1.InventoryStatus{readyInventory(100)},
		[]*fleetv1.SinkStatus{{Kind: "KollectSnapshotSink", Namespace: "team-a", Name: "repo", Type: "git"}}
}

func readyInventory(items int64) *fleetv1.InventoryStatus {
	return &fleetv1.InventoryStatus{Namespace: "team-a", Name: "workloads", ItemCount: items,
		Conditions: []*fleetv1.Condition{{Type: "Ready", Status: "True", Reason: "SnapshotReady"}}}
}

// simAgent is a simulated agent speaking the real AgentService over HTTP/2: it holds a
// WatchConfig stream (reconnecting when it ends, as the real agent does), "applies" every
// configuration it receives and reports it with a heartbeat at once and then every beat.
type simAgent struct {
	name   string
	client fleetv1connect.AgentServiceClient
	beat   time.Duration // 0: heartbeat only when a configuration arrives

	behave  atomic.Pointer[behaviour]
	silent  atomic.Bool // true: sends no heartbeat (a cluster gone offline)
	mu      sync.Mutex
	cfg     *fleetv1.WatchConfigResponse
	configs atomic.Int64
	// reported is the revision of "base" in the last heartbeat the hub accepted.
	reported atomic.Int64
	// inflight counts heartbeats sent and not yet answered.
	inflight atomic.Int32
	// previews holds the messages that carried a preview, in order; mute stops the agent
	// answering them (an agent that does not know previews, or a slow one).
	previews []*fleetv1.WatchConfigResponse
	mute     atomic.Bool
}

// silence stops the agent's heartbeats and returns once none is on its way: from then on the
// hub hears nothing from it (a cluster gone offline).
func (a *simAgent) silence(t testing.TB) {
	t.Helper()
	a.silent.Store(true)
	eventually(t, func() error {
		if n := a.inflight.Load(); n != 0 {
			return fmt.Errorf("%s: %d heartbeats on their way", a.name, n)
		}
		return nil
	})
}

// startAgent registers a cluster and runs its simulated agent until the test ends.
func (h *testHub) startAgent(t testing.TB, token, name string, labels map[string]string, beat time.Duration, b behaviour) *simAgent {
	t.Helper()
	client, _, err := h.tryRegister(token, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	a := &simAgent{name: name, client: client, beat: beat}
	a.behave.Store(&b)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return a
}

func (a *simAgent) setBehaviour(b behaviour) { a.behave.Store(&b) }

func (a *simAgent) run(ctx context.Context) {
	if a.beat > 0 {
		go func() {
			t := time.NewTicker(a.beat)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					a.heartbeat(ctx)
				}
			}
		}()
	}
	for ctx.Err() == nil {
		stream, err := a.client.WatchConfig(ctx, connect.NewRequest(&fleetv1.WatchConfigRequest{}))
		if err == nil {
			for stream.Receive() {
				if msg := stream.Msg(); msg.GetPreview() != nil {
					a.mu.Lock()
					a.previews = append(a.previews, msg)
					a.mu.Unlock()
					if !a.mute.Load() {
						go a.answerPreview(ctx, msg.GetPreview())
					}
					continue
				}
				a.mu.Lock()
				a.cfg = stream.Msg()
				a.mu.Unlock()
				a.configs.Add(1)
				a.heartbeat(ctx)
			}
			stream.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // the hub restarts: dial again
		}
	}
}

// status is what the agent reports: every bundle of its configuration applied.
func (a *simAgent) status() *fleetv1.AgentStatus {
	a.mu.Lock()
	cfg := a.cfg
	a.mu.Unlock()
	st := &fleetv1.AgentStatus{AgentVersion: "v0.1.0", KubernetesVersion: "v1.37.2", ObservedAt: timestamppb.Now()}
	var base int64
	for _, b := range cfg.GetBundles() {
		ab := &fleetv1.AppliedBundle{Bundle: b.GetBundle(), Revision: b.GetRevision(), Digest: b.GetDigest()}
		for _, o := range b.GetObjects() {
			ab.Objects = append(ab.Objects, &fleetv1.ObjectResult{Object: o, Result: fleetv1.ApplyResult_APPLY_RESULT_APPLIED})
		}
		st.Bundles = append(st.Bundles, ab)
		if b.GetBundle() == "base" {
			base = b.GetRevision()
		}
	}
	st.ConfigDigest = cfg.GetConfigDigest()
	st.Inventories, st.Sinks = (*a.behave.Load())(base)
	return st
}

func (a *simAgent) heartbeat(ctx context.Context) {
	a.inflight.Add(1)
	defer a.inflight.Add(-1)
	if a.silent.Load() {
		return
	}
	st := a.status()
	// Errors are expected while the hub restarts; the next beat retries.
	if _, err := a.client.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: st})); err == nil {
		var rev int64
		for _, b := range st.GetBundles() {
			if b.GetBundle() == "base" {
				rev = b.GetRevision()
			}
		}
		a.reported.Store(rev)
	}
}

// revision returns the revision of bundle "base" the agent holds (0: none).
func (a *simAgent) revision() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, b := range a.cfg.GetBundles() {
		if b.GetBundle() == "base" {
			return b.GetRevision()
		}
	}
	return 0
}

// manifests returns a valid bundle that differs for every n.
func manifests(n int) string {
	return strings.Replace(goodBundle, "replicas > 0", fmt.Sprintf("replicas > %d", n), 1)
}

// apply applies revision n of bundle "base" to every cluster labelled fleet=yes.
func (h *testHub) apply(t testing.TB, n int, hold bool) int64 {
	t.Helper()
	resp, err := h.admin.ApplyBundle(context.Background(), connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "base", Manifests: manifests(n), Hold: hold,
		ClusterSelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"fleet": "yes"}}}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetRevision().GetRevision()
}

// waitAgents waits until every agent holds revision rev of "base" and the hub has accepted a
// heartbeat saying so (the baseline of a rollout is what the hub last heard).
func waitAgents(t testing.TB, rev int64, agents ...*simAgent) {
	t.Helper()
	eventually(t, func() error {
		for _, a := range agents {
			if got, told := a.revision(), a.reported.Load(); got != rev || told != rev {
				return fmt.Errorf("%s holds revision %d and reported %d, want %d", a.name, got, told, rev)
			}
		}
		return nil
	})
}

// waitRollout polls GetRollout until done accepts it, for up to 30 s.
func (h *testHub) waitRollout(t testing.TB, id int64, what string, done func(*fleetv1.Rollout) bool) *fleetv1.Rollout {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := h.admin.GetRollout(context.Background(), connect.NewRequest(&fleetv1.GetRolloutRequest{Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.Msg.GetRollout(); done(r) {
			return r
		} else if time.Now().After(deadline) {
			t.Fatalf("rollout %d: %s not reached within 30s; now %v", id, what, r)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func phaseIs(p fleetv1.RolloutPhase) func(*fleetv1.Rollout) bool {
	return func(r *fleetv1.Rollout) bool { return r.GetPhase() == p }
}

// clusterOf returns a rollout's cluster by name.
func clusterOf(t testing.TB, r *fleetv1.Rollout, name string) *fleetv1.RolloutCluster {
	t.Helper()
	for _, c := range r.GetClusters() {
		if c.GetCluster() == name {
			return c
		}
	}
	t.Fatalf("rollout %d has no cluster %s: %v", r.GetId(), name, r.GetClusters())
	return nil
}

// auditActions lists the audit log's actions about one target, oldest first.
func (h *testHub) auditActions(t testing.TB, target string) []string {
	t.Helper()
	resp, err := h.admin.ListAuditEvents(context.Background(), connect.NewRequest(&fleetv1.ListAuditEventsRequest{Limit: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	evs := resp.Msg.GetEvents()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].GetTarget() == target {
			out = append(out, evs[i].GetActor()+" "+evs[i].GetAction())
		}
	}
	return out
}

// evaluations reads kollect_hub_rollout_evaluations_total: the rollout engine's completed
// evaluations of an active rollout.
func (h *testHub) evaluations(t *testing.T) int64 {
	t.Helper()
	for _, line := range strings.Split(scrape(t, h), "\n") {
		if v, ok := strings.CutPrefix(line, "kollect_hub_rollout_evaluations_total "); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return int64(n)
			}
		}
	}
	t.Fatal("no kollect_hub_rollout_evaluations_total on /metrics")
	return 0
}

// awaitEvaluations closes a window for a negative about rollouts ("nothing moved"): it waits
// until the engine has completed two evaluations beyond the count at the call, so that a whole
// evaluation started after the call (the serial engine starts the second once the first is
// done) and what it wrote, if anything, is in the store. It replaces a sleep.
func (h *testHub) awaitEvaluations(t *testing.T) {
	t.Helper()
	from := h.evaluations(t)
	eventually(t, func() error {
		if n := h.evaluations(t); n < from+2 {
			return fmt.Errorf("rollout engine evaluations %d, want %d (the engine evaluates active rollouts only: did the rollout end?)", n, from+2)
		}
		return nil
	})
}

// desiredOf returns what the hub stores as the desired revision of "base" for each agent.
func (h *testHub) desiredOf(t testing.TB, agents ...*simAgent) map[string]int64 {
	t.Helper()
	list, err := h.admin.ListClusters(context.Background(), connect.NewRequest(&fleetv1.ListClustersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, a := range agents {
		want[a.name] = true
	}
	out := map[string]int64{}
	for _, c := range list.Msg.GetClusters() {
		if !want[c.GetName()] {
			continue
		}
		for _, b := range c.GetBundles() {
			if b.GetBundle() == "base" {
				out[c.GetName()] = b.GetDesiredRevision()
			}
		}
	}
	return out
}

// wantDesired fails unless the hub stores rev as the desired revision of every agent.
func (h *testHub) wantDesired(t testing.TB, rev int64, what string, agents ...*simAgent) {
	t.Helper()
	desired := h.desiredOf(t, agents...)
	for _, a := range agents {
		if got := desired[a.name]; got != rev {
			t.Fatalf("%s: the hub wants revision %d on %s, want %d: %v", what, got, a.name, rev, desired)
		}
	}
}
