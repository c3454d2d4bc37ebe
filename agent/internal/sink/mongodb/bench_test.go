package mongodb

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink/sinktest"
)

func benchRows(cluster, inventory string, n int) []export.Row {
	rows := make([]export.Row, n)
	for i := range rows {
		rows[i] = sinktest.Deployment(cluster, inventory, i, map[string]any{
			"replicas": i % 5, "images": []any{fmt.Sprintf("registry.example/team-%d/app:1", i%40), "envoy:1.30"},
			"labels": map[string]any{"team": fmt.Sprintf("team-%d", i%40), "tier": "web", "env": "prod"},
			"ready":  true, "strategy": "RollingUpdate", "serviceAccount": fmt.Sprintf("sa-%d", i%100),
		})
	}
	return rows
}

// benchSize is the inventory size of the benchmarks (100k, as the goals state).
const benchSize = 100_000

// BenchmarkInitialLoad100k measures a first export of 100k rows (unordered bulk inserts).
func BenchmarkInitialLoad100k(b *testing.B) {
	ctx := context.Background()
	db := newDatabase(b)
	s, _ := newSink(b, db, "east")
	rows := benchRows("east", "apps", benchSize)
	var total time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		inv := fmt.Sprintf("load-%d", i)
		i++
		in := slices.Clone(rows)
		for j := range in {
			in[j] = in[j].With(func(o *export.Origin) { o.Inventory = inv })
		}
		batch := (&agent{sink: s, cluster: "east", inventory: inv}).batch(in)
		b.StartTimer()
		start := time.Now()
		if err := s.Export(ctx, batch); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(benchSize*i)/total.Seconds(), "rows/s")
}

// BenchmarkDiff1kOn100k measures exports changing 1k rows (500 changed, 250 added, 250
// deleted) of a 100k-row inventory. On FerretDB v1 every document an update changes is looked
// up with a collection scan (BenchmarkServerUpdateByID), and the export ends 750 versions
// with updates, so one export takes the better part of an hour there (844 s measured with the
// 500 upserts of the design before generations): it runs only with KOLLECT_BENCH_MONGO_DIFF=1
// (meant for a real MongoDB).
func BenchmarkDiff1kOn100k(b *testing.B) {
	if os.Getenv("KOLLECT_BENCH_MONGO_DIFF") == "" {
		b.Skip("most of an hour an export on FerretDB v1 (a collection scan per updated document); set KOLLECT_BENCH_MONGO_DIFF=1 to run it")
	}
	benchDiff(b, benchSize)
}

// BenchmarkDiff1kOn10k is the same on 10k rows: FerretDB's cost per write grows with the
// collection, the sink's does not.
func BenchmarkDiff1kOn10k(b *testing.B) { benchDiff(b, 10_000) }

func benchDiff(b *testing.B, size int) {
	ctx := context.Background()
	s, _ := newSink(b, newDatabase(b), "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, benchRows("east", "apps", size)); err != nil {
		b.Fatal(err)
	}
	var durations []time.Duration
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		next := slices.Clone(a.prev.Rows)
		step := len(next) / 750
		for k := range 750 {
			j := k * step
			if k < 500 {
				next[j].Attributes, _ = export.EncodeAttributes(map[string]any{"replicas": round})
				continue
			}
			fresh := sinktest.Deployment("east", "apps", j, map[string]any{"replicas": round})
			fresh.UID, fresh.Name = fmt.Sprintf("east-r%d-%05d", round, j), fmt.Sprintf("app-%05d-r%d", j, round)
			next[j] = fresh
		}
		batch := a.batch(next)
		b.StartTimer()
		start := time.Now()
		// A deadline, as the delivery worker sets: a server that stops answering (as FerretDB v1 did
		// on update commands of 100 updates, see updateChunk) must fail the benchmark, not
		// hang it. Generous, because FerretDB scans the collection once per update.
		ectx, cancel := context.WithTimeout(ctx, time.Hour)
		err := s.Export(ectx, batch)
		cancel()
		if err != nil {
			b.Fatalf("diff export %d: %v", round, err)
		}
		durations = append(durations, time.Since(start))
		a.accept()
	}
	slices.Sort(durations)
	if n := len(durations); n > 0 {
		b.ReportMetric(durations[n/2].Seconds(), "p50-s")
		b.ReportMetric(durations[min(n-1, n*99/100)].Seconds(), "p99-s")
	}
}

// BenchmarkServerInsertCeiling inserts 10k documents with the driver alone (no sink), to show
// how much of the sink's figures is the server: FerretDB on SQLite is far slower than mongod.
func BenchmarkServerInsertCeiling(b *testing.B) {
	ctx := context.Background()
	rows := benchRows("east", "apps", 10_000)
	now := bson.NewDateTimeFromTime(time.Now())
	var total time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		coll := collection(b, newDatabase(b), "rows")
		models := make([]mongo.WriteModel, len(rows))
		for i := range rows {
			models[i], _ = insertModel(&rows[i], now)
		}
		b.StartTimer()
		start := time.Now()
		if _, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		n += len(rows)
	}
	b.ReportMetric(float64(n)/total.Seconds(), "rows/s")
}

// insertModel and upsertModel are the driver shapes the server benchmarks measure: the insert
// of a row document, and its update by _id with upsert (what the sink sent for a changed row
// before generations; it now inserts a new version instead).
func insertModel(r *export.Row, now bson.DateTime) (mongo.WriteModel, error) {
	fields, err := rowFields(r)
	if err != nil {
		return nil, err
	}
	doc := append(bson.D{{Key: "_id", Value: rowID(r)}}, fields...)
	doc = append(doc, bson.E{Key: "first_seen", Value: now}, bson.E{Key: "updated_at", Value: now})
	return mongo.NewInsertOneModel().SetDocument(doc), nil
}

func upsertModel(r *export.Row, now bson.DateTime) (mongo.WriteModel, error) {
	fields, err := rowFields(r)
	if err != nil {
		return nil, err
	}
	fields = append(fields, bson.E{Key: "updated_at", Value: now})
	return mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: rowID(r)}}).SetUpsert(true).
		SetUpdate(bson.D{{Key: "$set", Value: fields}, {Key: "$setOnInsert", Value: bson.D{{Key: "first_seen", Value: now}}}}), nil
}

// BenchmarkServerUpdateByID runs an update shape (updateOne by _id with upsert, one command of
// updateChunk updates) with the driver alone, on collections of 1k and 10k
// documents. On MongoDB the _id index makes its cost independent of the collection's size; on
// FerretDB v1 (SQLite) it grows with it, because FerretDB's _id lookups do not use its _id
// index (the query reads _ferretdb_sjson->'$._id', the index holds _ferretdb_sjson->'_id'), so
// every update scans the collection. That, not the sink, bounds the diff benchmarks there.
func BenchmarkServerUpdateByID(b *testing.B) {
	for _, size := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("docs=%d", size), func(b *testing.B) {
			ctx := context.Background()
			coll := collection(b, newDatabase(b), "rows")
			rows := benchRows("east", "apps", size)
			now := bson.NewDateTimeFromTime(time.Now())
			models := make([]mongo.WriteModel, len(rows))
			for i := range rows {
				models[i], _ = insertModel(&rows[i], now)
			}
			if _, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
				b.Fatal(err)
			}
			step := size / updateChunk
			round, updates := 0, 0
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				round++
				batch := make([]mongo.WriteModel, updateChunk)
				for k := range batch {
					r := rows[k*step]
					r.Attributes, _ = export.EncodeAttributes(map[string]any{"replicas": round})
					batch[k], _ = upsertModel(&r, now)
				}
				b.StartTimer()
				start := time.Now()
				if _, err := coll.BulkWrite(ctx, batch, options.BulkWrite().SetOrdered(false)); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				updates += len(batch)
			}
			b.ReportMetric(total.Seconds()*1000/float64(updates), "ms/update")
		})
	}
}
