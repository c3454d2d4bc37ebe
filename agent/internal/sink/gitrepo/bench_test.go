package gitrepo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// benchRows builds n rows spread over 100 namespaces, with attributes of a typical profile.
func benchRows(b *testing.B, cluster string, n int) []export.Row {
	rows := make([]export.Row, n)
	for i := range rows {
		ns := fmt.Sprintf("team-%02d", i%100)
		name := fmt.Sprintf("app-%06d", i)
		raw, err := export.EncodeAttributes(map[string]any{
			"image": "registry.example/" + name + ":1." + strconv.Itoa(i%7), "replicas": i % 5, "ready": i%3 != 0,
			"labels": map[string]any{"app": name, "tier": "web"}, "cpu": 0.25,
		})
		if err != nil {
			b.Fatal(err)
		}
		rows[i] = export.Row{Origin: &export.Origin{Cluster: cluster, Inventory: "workloads", Target: "deploys", Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: ns, Name: name, UID: fmt.Sprintf("uid-%06d", i), Attributes: raw}
	}
	return rows
}

// resetPeakRSS makes VmHWM start again from the current RSS (Linux: clear_refs 5), so each
// benchmark reports its own peak.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func peakRSSMB() float64 { return statusMB("VmHWM:") }

// rssMB is the current RSS: at the start of a run, what the process held before the sink ran.
func rssMB() float64 { return statusMB("VmRSS:") }

func statusMB(field string) float64 {
	raw, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, field) {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// benchBatches prepares the three exports every snapshot-sink benchmark times: all rows, one
// row changed, and the same snapshot again. Snapshots are built outside the timed region:
// the agent core builds them once for every sink.
func benchBatches(b *testing.B, cluster string, n int) [3]*sink.Batch {
	rows := benchRows(b, cluster, n)
	changed := append([]export.Row(nil), rows...)
	changed[n/2].Attributes = []byte(`{"replicas":99}`)
	var out [3]*sink.Batch
	var prev *export.Snapshot
	for i, rs := range [][]export.Row{rows, changed, changed} {
		snap := export.NewSnapshot(append([]export.Row(nil), rs...))
		out[i] = &sink.Batch{
			Envelope: export.Envelope{SchemaVersion: export.SchemaVersion, Cluster: cluster, Inventory: "workloads",
				Generation: int64(i + 1), ExportedAt: time.Now(), ItemCount: snap.Len(), Checksum: snap.Checksum, Rows: snap.Rows},
			Diff: export.Compute(prev, snap),
		}
		if prev != nil {
			out[i].PreviousChecksum = prev.Checksum
		}
		prev = snap
	}
	return out
}

// heapPeaks samples the heap while an export runs: runtime/metrics reads need no
// stop-the-world, so a fast ticker costs the benchmark little.
type heapPeaks struct {
	stop chan struct{}
	done chan struct{}
	// objects is the largest heap seen (live and not yet swept), live the largest live heap
	// a garbage collection measured: what a memory limit must hold, GOMEMLIMIT making the
	// collector work harder as the heap approaches it.
	objects, live uint64
}

func sampleHeap() *heapPeaks {
	h := &heapPeaks{stop: make(chan struct{}), done: make(chan struct{})}
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	go func() {
		defer close(h.done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(samples)
			h.objects = max(h.objects, samples[0].Value.Uint64())
			if live := samples[1].Value.Uint64(); live > h.live {
				h.live = live
				writePeakProfile()
			}
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapPeaks) finish() { close(h.stop); <-h.done }

// writePeakProfile writes a heap profile to $KOLLECT_BENCH_PEAK_PROFILE, when set, each time a
// collection measures a new largest live heap: the last one written shows what the peak held
// (a -memprofile, written at the end, shows the allocations only).
func writePeakProfile() {
	path := os.Getenv("KOLLECT_BENCH_PEAK_PROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("heap").WriteTo(f, 0)
}

// liveHeapMB is the live heap after a full collection: the benchmark's own data (rows and
// batches), which the agent's core holds too.
func liveHeapMB() float64 {
	runtime.GC()
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(samples)
	return float64(samples[0].Value.Uint64()) / (1 << 20)
}

// benchRemote makes an empty repository for one benchmark run: file:// (served in process, so
// the process's figures include the server's side of each push) or smart HTTP (git's own
// server in another process: the figures are the agent's alone, as against a forge).
func benchRemote(b *testing.B, transport string) (url string, creds map[string][]byte) {
	if transport == "file" {
		repo, err := testenv.InitBareRepo(filepath.Join(b.TempDir(), "bench.git"))
		if err != nil {
			b.Fatal(err)
		}
		return "file://" + repo, nil
	}
	name := uniqueRepo("bench")
	if _, err := gitServer.InitBareRepo(name); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(filepath.Join(gitServer.Root, name)) })
	return gitServer.URL + "/" + name, map[string][]byte{"username": []byte(user), "password": []byte(pass)}
}

func benchmarkGit(b *testing.B, mode v1alpha1.LayoutMode) {
	batches := benchBatches(b, "east", 100_000)
	for _, transport := range []string{"file", "http"} {
		b.Run(transport, func(b *testing.B) { benchmarkGitOver(b, mode, transport, batches) })
	}
}

func benchmarkGitOver(b *testing.B, mode v1alpha1.LayoutMode, transport string, batches [3]*sink.Batch) {
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		url, creds := benchRemote(b, transport)
		s := newSink(b, "east", url, mode, creds)
		base := liveHeapMB()
		resetPeakRSS()
		startRSS := rssMB()
		heap := sampleHeap()
		b.StartTimer()
		var took [3]time.Duration
		for i, batch := range batches {
			start := time.Now()
			res, err := s.Publish(ctx, batch, "main", "")
			if err != nil {
				b.Fatal(err)
			}
			took[i] = time.Since(start)
			if res.Commit.IsZero() != (i == 2) {
				b.Fatalf("export %d: commit %s", i, res.Commit)
			}
		}
		// A restarted agent: a new sink on the same cache, a full diff, so the export renders
		// and compares the tree before deciding that there is nothing to commit.
		restarted, err := Open(ctx, &s.cfg, v1alpha1.Serialization{}, v1alpha1.Layout{Mode: mode}, s.env, "oauth2")
		if err != nil {
			b.Fatal(err)
		}
		full := *batches[2]
		full.Diff = export.Diff{Full: true, Added: full.Envelope.Rows}
		start := time.Now()
		if res, err := restarted.Publish(ctx, &full, "main", ""); err != nil || !res.Commit.IsZero() {
			b.Fatalf("restart: %v %s", err, res.Commit)
		}
		heap.finish()
		b.ReportMetric(time.Since(start).Seconds(), "s-unchanged-after-restart")
		b.ReportMetric(took[0].Seconds(), "s-full")
		b.ReportMetric(took[1].Seconds(), "s-1-row-changed")
		b.ReportMetric(took[2].Seconds(), "s-unchanged")
		b.ReportMetric(peakRSSMB(), "peak-RSS-MB")
		b.ReportMetric(startRSS, "start-RSS-MB")
		b.ReportMetric(base, "rows-heap-MB")
		b.ReportMetric(float64(heap.objects)/(1<<20), "peak-heap-MB")
		b.ReportMetric(float64(heap.live)/(1<<20), "peak-live-heap-MB")
	}
}

// BenchmarkGitDocument100k exports 100k rows as one YAML document: the first export, one
// changed row, and an unchanged snapshot.
func BenchmarkGitDocument100k(b *testing.B) { benchmarkGit(b, v1alpha1.LayoutDocument) }

// BenchmarkGitPerResource100k exports 100k rows as 100k YAML files.
func BenchmarkGitPerResource100k(b *testing.B) { benchmarkGit(b, v1alpha1.LayoutPerResource) }
