package server_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
	"kollect.dev/testenv"
)

// benchAgents is how many simulated agents BenchmarkConfigPropagation connects; override with
// KOLLECT_BENCH_AGENTS (the goal is 5,000 within 1 GiB).
func benchAgents(b *testing.B) int {
	if v := os.Getenv("KOLLECT_BENCH_AGENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("KOLLECT_BENCH_AGENTS=%q", v)
		}
		return n
	}
	return 1000
}

// rssMiB is this process's resident set (hub and simulated agents together).
func rssMiB(b *testing.B) float64 {
	v, err := testenv.ProcessRSSMiB(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// cpuTime is the CPU time this process has used (user and system).
func cpuTime(b *testing.B) time.Duration {
	v, err := testenv.ProcessCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// round tracks one revision's propagation: how many agents still have to receive it.
type round struct {
	revision  int64
	remaining atomic.Int64
	done      chan struct{}
}

// BenchmarkConfigPropagation connects N simulated agents — real Connect clients, each with its
// own TLS connection, registered with a bootstrap token and holding a WatchConfig stream — to
// one hub (SQLite store), then measures the time from ApplyBundle of a new revision until every
// agent has received it. It reports the process RSS (hub and agents together) once all are
// connected.
func BenchmarkConfigPropagation(b *testing.B) {
	n := benchAgents(b)
	h := startHub(b, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tok := h.bootstrapToken(b, time.Hour, 0, false)

	var current atomic.Pointer[round]
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	ready := make(chan struct{}, n)
	start := time.Now()
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent, _, err := h.tryRegister(tok.GetSecret(), fmt.Sprintf("c%05d", i), map[string]string{"env": "bench"})
			if err != nil {
				<-sem
				b.Error(err)
				return
			}
			stream, err := agent.WatchConfig(ctx, connect.NewRequest(&fleetv1.WatchConfigRequest{}))
			<-sem
			if err != nil {
				b.Error(err)
				return
			}
			first := true
			for stream.Receive() {
				if first {
					ready <- struct{}{}
					first = false
				}
				r := current.Load()
				if r == nil {
					continue
				}
				for _, a := range stream.Msg().GetBundles() {
					if a.GetBundle() == "bench" && a.GetRevision() == r.revision && r.remaining.Add(-1) == 0 {
						close(r.done)
					}
				}
			}
		}()
	}
	for range n {
		select {
		case <-ready:
		case <-time.After(5 * time.Minute):
			b.Fatalf("agents not connected after 5 minutes (%d streams open)", h.srv.Connected())
		}
	}
	connectTime := time.Since(start)
	runtime.GC()
	idleRSS := rssMiB(b)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	cpu0 := cpuTime(b)
	time.Sleep(5 * time.Second)
	idleCPU := float64(cpuTime(b)-cpu0) / float64(5*time.Second) * 100
	b.Logf("%d agents registered and streaming in %v; RSS %.0f MiB, Go heap in use %.0f MiB, goroutines %d, idle CPU %.1f%%",
		n, connectTime.Round(time.Millisecond), idleRSS, float64(ms.HeapInuse)/(1<<20), runtime.NumGoroutine(), idleCPU)

	rev := int64(0)
	b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
		var worst time.Duration
		cpuStart := cpuTime(b)
		for b.Loop() {
			rev++
			r := &round{revision: rev, done: make(chan struct{})}
			r.remaining.Store(int64(n))
			current.Store(r)
			manifests := strings.Replace(goodBundle, "replicas > 0", fmt.Sprintf("replicas > %d", rev), 1)
			t0 := time.Now()
			if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
				Name: "bench", Manifests: manifests, ClusterSelector: &fleetv1.LabelSelector{
					MatchLabels: map[string]string{"env": "bench"}}})); err != nil {
				b.Fatal(err)
			}
			select {
			case <-r.done:
			case <-time.After(2 * time.Minute):
				b.Fatalf("revision %d reached %d of %d agents in 2 minutes", rev, int64(n)-r.remaining.Load(), n)
			}
			worst = max(worst, time.Since(t0))
		}
		b.ReportMetric(float64((cpuTime(b)-cpuStart).Milliseconds())/float64(b.N), "CPU-ms/op")
		b.ReportMetric(idleCPU, "idle-CPU-%")
		b.ReportMetric(float64(n), "agents")
		b.ReportMetric(idleRSS, "idle-RSS-MiB")
		b.ReportMetric(rssMiB(b), "RSS-MiB")
		b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
	})
	cancel()
	wg.Wait()
}

// BenchmarkRollout measures a staged rollout without gates (applied only, min_healthy 0) to N
// simulated agents (KOLLECT_BENCH_AGENTS, default 1,000) in 10 waves of 10%: real Connect
// clients, each with its own TLS connection and WatchConfig stream, that report a heartbeat
// as soon as they receive a configuration. One op is ApplyBundle with hold, StartRollout, and
// the wait until the rollout is completed. CPU is the whole process: the hub and the agents.
func BenchmarkRollout(b *testing.B) {
	n := benchAgents(b)
	h := startHub(b, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tok := h.bootstrapToken(b, time.Hour, 0, false)

	agents := make([]*simAgent, n)
	var wg, registering sync.WaitGroup
	sem := make(chan struct{}, 32)
	start := time.Now()
	for i := range n {
		sem <- struct{}{}
		registering.Add(1)
		go func() {
			defer registering.Done()
			defer func() { <-sem }()
			client, _, err := h.tryRegister(tok.GetSecret(), fmt.Sprintf("c%05d", i), fleetLabels())
			if err != nil {
				b.Error(err)
				return
			}
			a := &simAgent{name: fmt.Sprintf("c%05d", i), client: client}
			a.setBehaviour(healthy)
			agents[i] = a
			wg.Add(1)
			go func() { defer wg.Done(); a.run(ctx) }()
		}()
	}
	registering.Wait()
	// Everyone holds revision 1 first.
	h.apply(b, 1, false)
	waitAll := func(rev int64, within time.Duration) {
		deadline := time.Now().Add(within)
		for {
			behind := 0
			for _, a := range agents {
				if a == nil || a.revision() != rev {
					behind++
				}
			}
			if behind == 0 {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d agents lack revision %d after %v", behind, n, rev, within)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitAll(1, 5*time.Minute)
	b.Logf("%d agents registered, streaming and on revision 1 in %v", n, time.Since(start).Round(time.Millisecond))

	strategy := &fleetv1.RolloutStrategy{WaveSize: &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Percent{Percent: 10}},
		Gates: &fleetv1.RolloutGates{SkipInventoriesReady: true, SkipSinkErrors: true}}
	rev := 1
	b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
		var wall time.Duration
		cpu0 := cpuTime(b)
		for b.Loop() {
			rev++
			t0 := time.Now()
			h.apply(b, rev, true)
			started, err := h.admin.StartRollout(ctx, connect.NewRequest(&fleetv1.StartRolloutRequest{Bundle: "base", Strategy: strategy}))
			if err != nil {
				b.Fatal(err)
			}
			if w := len(started.Msg.GetRollout().GetWaves()); w != 10 {
				b.Fatalf("%d waves, want 10", w)
			}
			id := started.Msg.GetRollout().GetId()
			for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
				list, err := h.admin.ListRollouts(ctx, connect.NewRequest(&fleetv1.ListRolloutsRequest{Bundle: "base", Limit: 1}))
				if err != nil {
					b.Fatal(err)
				}
				r := list.Msg.GetRollouts()[0]
				if r.GetId() == id && r.GetPhase() == fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED {
					break
				}
				if r.GetPhase() != fleetv1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING || time.Now().After(deadline) {
					b.Fatalf("rollout %d: %v", id, r)
				}
			}
			wall += time.Since(t0)
		}
		waitAll(int64(rev), time.Minute)
		b.ReportMetric(wall.Seconds()/float64(b.N), "s/rollout")
		b.ReportMetric((cpuTime(b)-cpu0).Seconds()/float64(b.N), "CPU-s/rollout")
		b.ReportMetric(float64(n), "agents")
		b.ReportMetric(rssMiB(b), "RSS-MiB")
	})
	cancel()
	wg.Wait()
}

// BenchmarkHeartbeat measures ReportStatus, the call every agent makes every heartbeat
// interval, on a hub (SQLite store) with N registered clusters (KOLLECT_BENCH_AGENTS, default
// 1,000), each reporting over its own TLS connection, 32 calls in flight. One op is one
// heartbeat. "unchanged" repeats each cluster's status (the steady state of a fleet: most
// heartbeats change nothing); "changed" reports a different item count every time, so each
// heartbeat is news. CPU is the whole process: the hub and the simulated agents.
func BenchmarkHeartbeat(b *testing.B) {
	n := benchAgents(b)
	h := startHub(b, "")
	ctx := context.Background()
	tok := h.bootstrapToken(b, time.Hour, 0, false)
	agents := make([]fleetv1connect.AgentServiceClient, n)
	var registering sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		registering.Add(1)
		go func() {
			defer registering.Done()
			defer func() { <-sem }()
			client, _, err := h.tryRegister(tok.GetSecret(), fmt.Sprintf("c%05d", i), fleetLabels())
			if err != nil {
				b.Error(err)
				return
			}
			agents[i] = client
		}()
	}
	registering.Wait()
	if b.Failed() {
		b.FailNow()
	}
	h.apply(b, 1, false)
	// Every cluster has reported once: the first heartbeat of a cluster is always news.
	for i, a := range agents {
		if _, err := a.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: benchStatus(i, 100)})); err != nil {
			b.Fatal(err)
		}
	}

	for _, changing := range []bool{false, true} {
		name := "unchanged"
		if changing {
			name = "changed"
		}
		b.Run(fmt.Sprintf("%s/agents=%d", name, n), func(b *testing.B) {
			var next, beat atomic.Int64
			cpu0 := cpuTime(b)
			b.SetParallelism(16) // 32 calls in flight on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(next.Add(1)) % n
					items := int64(100)
					if changing {
						items += beat.Add(1)
					}
					st := benchStatus(i, items)
					if _, err := agents[i].ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: st})); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "CPU-µs/op")
			b.ReportMetric(float64(n), "agents")
		})
	}
}

// benchStatus is a typical heartbeat: one bundle of three applied objects, two ready
// inventories and two sinks that export without error.
func benchStatus(i int, items int64) *fleetv1.AgentStatus {
	ready := []*fleetv1.Condition{{Type: "Ready", Status: "True", Reason: "SnapshotReady"}}
	ok := timestamppb.New(time.Unix(1_800_000_000, 0))
	st := &fleetv1.AgentStatus{AgentVersion: "v0.1.0", KubernetesVersion: "v1.37.2", ObservedAt: ok,
		ConfigDigest: fmt.Sprintf("sha256:%064d", i),
		Bundles:      []*fleetv1.AppliedBundle{{Bundle: "base", Revision: 1, Digest: "sha256:base"}},
		Inventories: []*fleetv1.InventoryStatus{
			{Namespace: "team-a", Name: "workloads", ItemCount: items, Conditions: ready},
			{Namespace: "team-a", Name: "config", ItemCount: 40, Conditions: ready},
		},
		Sinks: []*fleetv1.SinkStatus{
			{Kind: "KollectSnapshotSink", Namespace: "team-a", Name: "repo", Type: "git", LastSuccessTime: ok, LastAttemptTime: ok},
			{Kind: "KollectDatabaseSink", Namespace: "team-a", Name: "warehouse", Type: "postgres", LastSuccessTime: ok, LastAttemptTime: ok},
		},
	}
	for _, kind := range []string{"KollectProfile", "KollectInventory", "KollectSnapshotSink"} {
		st.Bundles[0].Objects = append(st.Bundles[0].Objects, &fleetv1.ObjectResult{
			Object: &fleetv1.ObjectRef{ApiVersion: "kollect.dev/v1alpha1", Kind: kind, Namespace: "team-a", Name: "web"},
			Result: fleetv1.ApplyResult_APPLY_RESULT_APPLIED})
	}
	return st
}
