package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// benchRows builds n rows of a realistic size (about 300 bytes of attributes).
func benchRows(cluster, inventory string, n, version int) []export.Row {
	rows := make([]export.Row, n)
	for i := range rows {
		rows[i] = sinktest.Deployment(cluster, inventory, i, map[string]any{
			"replicas": i % 5, "images": []any{fmt.Sprintf("registry.example/team-%d/app:%d", i%40, version), "envoy:1.30"},
			"labels": map[string]any{"team": fmt.Sprintf("team-%d", i%40), "tier": "web", "env": "prod"},
			"ready":  true, "strategy": "RollingUpdate", "serviceAccount": fmt.Sprintf("sa-%d", i%100),
		})
	}
	return rows
}

// BenchmarkInitialLoad100k measures a first export of 100k rows (one transaction: COPY,
// upsert, state). Goal: ≥ 50k rows/s.
func BenchmarkInitialLoad100k(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	db := newDatabase(b)
	s, _ := newSink(b, db, "east")
	rows := benchRows("east", "apps", n, 1)
	var total time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		inv := fmt.Sprintf("load-%d", i)
		i++
		inRows := slices.Clone(rows)
		for j := range inRows {
			inRows[j] = inRows[j].With(func(o *export.Origin) { o.Inventory = inv })
		}
		a := &agent{sink: s, cluster: "east", inventory: inv}
		batch := a.batch(inRows)
		b.StartTimer()
		start := time.Now()
		if err := s.Export(ctx, batch); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(n*i)/total.Seconds(), "rows/s")
}

// BenchmarkDiff1kOn100k measures exports that change 1k rows (500 changed, 250 added, 250
// deleted) of a 100k-row inventory. Goal: p99 ≤ 0.3 s.
func BenchmarkDiff1kOn100k(b *testing.B) {
	s, _ := newSink(b, newDatabase(b), "east")
	benchDiff(b, s)
}

// BenchmarkDiffHistory is BenchmarkDiff1kOn100k with history off and on: the cost of closing
// 750 versions (500 changed, 250 deleted) and opening 750 (500 changed, 250 added) in the
// diff's transaction, on a history seeded with the 100k rows.
func BenchmarkDiffHistory(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			sp := spec(newDatabase(b))
			sp.History = on
			s, err := open(context.Background(), sp, testEnv("east"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			benchDiff(b, s)
		})
	}
}

// benchDiff loads 100k rows through s, then measures exports that change 1k of them.
func benchDiff(b *testing.B, s *Sink) {
	const n = 100_000
	ctx := context.Background()
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	rows := benchRows("east", "apps", n, 1)
	if err := a.export(ctx, rows); err != nil {
		b.Fatal(err)
	}
	var durations []time.Duration
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		next := slices.Clone(a.prev.Rows)
		mutateThousand(next, round, "east", "apps")
		batch := a.batch(next)
		b.StartTimer()
		start := time.Now()
		if err := s.Export(ctx, batch); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(start))
		a.accept()
	}
	reportLatency(b, durations)
}

// mutateThousand changes 500 rows, replaces 250 by new keys (250 deleted + 250 added).
func mutateThousand(rows []export.Row, round int, cluster, inventory string) {
	step := len(rows) / 750
	for k := range 750 {
		j := k * step
		if k < 500 {
			attrs, _ := export.EncodeAttributes(map[string]any{"replicas": round, "image": fmt.Sprintf("app:%d", round)})
			rows[j].Attributes = attrs
			continue
		}
		fresh := sinktest.Deployment(cluster, inventory, j, map[string]any{"replicas": round})
		fresh.UID = fmt.Sprintf("%s-r%d-%05d", cluster, round, j)
		fresh.Name = fmt.Sprintf("app-%05d-r%d", j, round)
		rows[j] = fresh
	}
}

func reportLatency(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	p := func(q float64) float64 { return d[min(len(d)-1, int(q*float64(len(d))))].Seconds() }
	b.ReportMetric(p(0.5), "p50-s")
	b.ReportMetric(p(0.99), "p99-s")
}

// BenchmarkConfirmOn100k measures one confirmation of a 100k-row inventory: a single UPDATE
// of its state row, whatever the number of rows.
func BenchmarkConfirmOn100k(b *testing.B) {
	ctx := context.Background()
	db := newDatabase(b)
	s, _ := newSink(b, db, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, benchRows("east", "apps", 100_000, 1)); err != nil {
		b.Fatal(err)
	}
	c := sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.prev.Checksum}
	for b.Loop() {
		c.At = time.Now().UTC()
		if err := s.Confirm(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHistoryCheck100k measures what history: true adds to an agent's start: the first
// export of an unchanged 100k-row inventory checks the history against the rows (and writes
// nothing, the history being current).
func BenchmarkHistoryCheck100k(b *testing.B) {
	ctx := context.Background()
	sp := spec(newDatabase(b))
	sp.History = true
	s, err := open(ctx, sp, testEnv("east"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	rows := benchRows("east", "apps", 100_000, 1)
	if err := a.export(ctx, rows); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		s.mu.Lock()
		s.seeded = map[string]bool{} // a restarted agent's sink
		s.mu.Unlock()
		batch := a.batch(rows)
		b.StartTimer()
		if err := s.Export(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
}
