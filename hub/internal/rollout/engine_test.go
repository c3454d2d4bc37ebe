package rollout_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"kollect.dev/hub/internal/health"
	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/rollout"
	"kollect.dev/hub/internal/store"
	"kollect.dev/hub/internal/store/sqlstore"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// counting counts the engine's reads of the store.
type counting struct {
	store.Store
	fleetReads, rowReads, fullListings atomic.Int64
	judged                             atomic.Int64 // most names one ObserveClusters asked for
}

func (c *counting) ObserveFleet(ctx context.Context, bundle string) ([]store.Observed, error) {
	c.fleetReads.Add(1)
	return c.Store.ObserveFleet(ctx, bundle)
}

func (c *counting) ObserveClusters(ctx context.Context, bundle string, names []string) ([]store.Observed, error) {
	if n := int64(len(names)); n > c.judged.Load() {
		c.judged.Store(n)
	}
	return c.Store.ObserveClusters(ctx, bundle, names)
}

func (c *counting) RolloutClusters(ctx context.Context, id int64) ([]store.RolloutCluster, error) {
	c.rowReads.Add(1)
	return c.Store.RolloutClusters(ctx, id)
}

func (c *counting) ListClusters(ctx context.Context) ([]store.Cluster, error) {
	c.fullListings.Add(1)
	return c.Store.ListClusters(ctx)
}

// TestEnginePassesReadTheRunningWave: a rollout of 50 clusters in 5 waves, each cluster
// reporting the target revision once moved. The engine reads the whole fleet (without status)
// once, and again only when a registration changes it; it reads the rollout's rows once (it
// applies its own steps to what it holds); every pass reads only the clusters of the running
// wave and the next; no pass lists the clusters with their statuses.
func TestEnginePassesReadTheRunningWave(t *testing.T) {
	ctx := context.Background()
	raw, err := sqlstore.Open(ctx, filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	st := &counting{Store: raw}
	now := time.Now().UTC()
	if err := raw.CreateBootstrapToken(ctx, store.BootstrapToken{ID: "t", Hash: "h", ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	register := func(name string) {
		t.Helper()
		if _, err := raw.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h", Name: name, Labels: map[string]string{"env": "prod"},
			CredentialHash: "cred-" + name, Now: now}, labelsel.Match); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		register(fmt.Sprintf("c%02d", i))
	}
	sel := `{"matchLabels":{"env":"prod"}}`
	for rev, hold := range []bool{false, true} {
		if _, _, _, err := raw.CreateRevision(ctx, store.Revision{Bundle: "base", Manifests: fmt.Sprintf("a: %d\n", rev),
			Selector: sel, Digest: fmt.Sprintf("d%d", rev), Objects: "[]", CreatedAt: now}, "", hold, labelsel.Match); err != nil {
			t.Fatal(err)
		}
	}
	e := rollout.New(rollout.Config{Store: st, Thresholds: health.DefaultThresholds, Log: slog.New(slog.DiscardHandler)})
	r, _, err := e.Start(ctx, rollout.StartParams{Bundle: "base", Actor: "test", Strategy: &fleetv1.RolloutStrategy{
		WaveSize: &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Count{Count: 10}},
		Gates:    &fleetv1.RolloutGates{SkipInventoriesReady: true, SkipSinkErrors: true, SkipCoverage: true}}})
	if err != nil {
		t.Fatal(err)
	}
	// Agents: every cluster whose desired revision is 2 reports it applied.
	heartbeats := func() {
		t.Helper()
		desired, err := raw.Desired(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range desired {
			status, _ := protojson.Marshal(&fleetv1.AgentStatus{Bundles: []*fleetv1.AppliedBundle{{Bundle: "base", Revision: d.Revision}}})
			if err := raw.RecordHeartbeat(ctx, store.Heartbeat{Cluster: d.Cluster, At: time.Now().UTC(), Status: string(status),
				Applied: map[string]int64{"base": d.Revision}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	fleetReads, rowReads := st.fleetReads.Load(), st.rowReads.Load()
	joined := false
	for pass := 0; ; pass++ {
		if pass > 100 {
			t.Fatal("rollout not completed in 100 passes")
		}
		time.Sleep(2 * time.Millisecond) // heartbeats must be later than the moves (milliseconds)
		heartbeats()
		if err := e.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := raw.GetRollout(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Phase == store.PhaseCompleted {
			break
		}
		if got.CurrentWave == 2 && !joined {
			// A registration mid-rollout moves the cluster epoch: the next pass reads the
			// fleet again and takes the new cluster into the last wave.
			register("late")
			joined = true
		}
	}
	if n := st.fleetReads.Load() - fleetReads; n != 1 {
		t.Errorf("the passes read the whole fleet %d times, want once (after the registration)", n)
	}
	if n := st.rowReads.Load() - rowReads; n != 0 {
		t.Errorf("the passes read the rollout's rows %d times, want 0 (Start's pass read them)", n)
	}
	if n := st.judged.Load(); n > 21 {
		t.Errorf("a pass read %d clusters, want at most two waves' worth and the joiner (21)", n)
	}
	if n := st.fullListings.Load(); n != 0 {
		t.Errorf("the engine listed every cluster with its status %d times", n)
	}
	rows, err := raw.RolloutClusters(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	healthy := 0
	for _, c := range rows {
		if c.State == store.ClusterHealthy {
			healthy++
		}
	}
	if len(rows) != 51 || healthy != 51 {
		t.Fatalf("rollout completed with %d rows, %d healthy; want 51 (the joiner too)", len(rows), healthy)
	}
}
