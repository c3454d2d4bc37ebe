package nats

import (
	"fmt"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
)

func benchRows(n, version int) []export.Row {
	rows := make([]export.Row, n)
	for i := range rows {
		rows[i] = row(fmt.Sprint(i), version)
		rows[i].Namespace = fmt.Sprintf("ns-%d", i%50)
	}
	return rows
}

// BenchmarkInitialExport100k measures a first export (Full) of 100k rows to a new stream.
func BenchmarkInitialExport100k(b *testing.B) {
	s := export.NewSnapshot(benchRows(100_000, 1))
	var elapsed time.Duration
	n := 0
	for i := 0; b.Loop(); i++ {
		sk := newSink(b, spec(server.URL, fmt.Sprintf("BENCH_INITIAL_%d_%d", time.Now().UnixNano(), i), ""), defaultEnv)
		var ex exporter
		start := time.Now()
		if err := ex.Export(b.Context(), sk, s); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		n += len(s.Rows)
		sk.Close()
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
}

// BenchmarkChurn1k measures steady churn: batches of 1k changed rows out of 100k.
func BenchmarkChurn1k(b *testing.B) {
	rows := benchRows(100_000, 0)
	sk := newSink(b, spec(server.URL, fmt.Sprintf("BENCH_CHURN_%d", time.Now().UnixNano()), ""), defaultEnv)
	var ex exporter
	if err := ex.Export(b.Context(), sk, export.NewSnapshot(append([]export.Row(nil), rows...))); err != nil {
		b.Fatal(err)
	}
	var elapsed time.Duration
	n := 0
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		for j := range 1000 {
			k := (i*1000 + j) % len(rows)
			r := row(rows[k].UID, i+1)
			r.Namespace = rows[k].Namespace // a row keeps its namespace, as objects do
			rows[k] = r
		}
		next := export.NewSnapshot(append([]export.Row(nil), rows...))
		b.StartTimer()
		start := time.Now()
		if err := ex.Export(b.Context(), sk, next); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		n += 1000
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
}

// BenchmarkRestartAfterChanges100k measures an agent restart after 1k of 100k rows changed
// while it was down, without a bucket: the inventory's messages read back from the stream
// (100k and more each round), the exact change published.
func BenchmarkRestartAfterChanges100k(b *testing.B) {
	rows := benchRows(100_000, 0)
	stream := fmt.Sprintf("BENCH_RESTART_%d", time.Now().UnixNano())
	var ex exporter
	if err := ex.Export(b.Context(), newSink(b, spec(server.URL, stream, ""), defaultEnv), export.NewSnapshot(append([]export.Row(nil), rows...))); err != nil {
		b.Fatal(err)
	}
	var elapsed time.Duration
	n := 0
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		for j := range 1000 {
			k := (i*1000 + j) % len(rows)
			r := row(rows[k].UID, i+1)
			r.Namespace = rows[k].Namespace // a row keeps its namespace, as objects do
			rows[k] = r
		}
		next := export.NewSnapshot(append([]export.Row(nil), rows...))
		restarted := exporter{Gen: ex.Gen}
		batch := restarted.Batch(next)
		batch.PreviousChecksum = ex.Accepted.Checksum
		sk := newSink(b, spec(server.URL, stream, ""), defaultEnv)
		b.StartTimer()
		start := time.Now()
		if err := sk.Export(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		ex.Gen, ex.Accepted = restarted.Gen, next
		n++
		sk.Close()
	}
	b.ReportMetric(float64(elapsed.Milliseconds())/float64(n), "ms/restart")
}
