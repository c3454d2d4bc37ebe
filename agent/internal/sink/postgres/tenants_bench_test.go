package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// BenchmarkTenantsFirstLoad measures the start of 100 tenants: 100 sinks of one table, each
// exporting its first 1,000 rows at once, with at most `parallel` exports running. It showed
// that capping the exports a destination runs at once does not shorten the start: about 4 s
// either way on two cores (docs/performance.md).
func BenchmarkTenantsFirstLoad(b *testing.B) {
	for _, parallel := range []int{100, 4} {
		b.Run(fmt.Sprintf("parallel=%d", parallel), func(b *testing.B) {
			const tenants, perTenant = 100, 1000
			ctx := context.Background()
			round := 0
			for b.Loop() {
				b.StopTimer()
				db := newDatabase(b)
				round++
				sinks := make([]*agent, tenants)
				batches := make([]*sink.Batch, tenants)
				for t := range tenants {
					s, _ := newSink(b, db, "east")
					inv := fmt.Sprintf("tenant-%d", t)
					rows := slices.Clone(benchRows("east", inv, perTenant, 1))
					for j := range rows {
						rows[j] = rows[j].With(func(o *export.Origin) { o.Inventory = inv })
					}
					sinks[t] = &agent{sink: s, cluster: "east", inventory: inv}
					batches[t] = sinks[t].batch(rows)
				}
				// The schema first, as the agent's first sink does.
				if err := sinks[0].sink.ensureSchema(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				sem := make(chan struct{}, parallel)
				var wg sync.WaitGroup
				for t := range tenants {
					wg.Go(func() {
						sem <- struct{}{}
						defer func() { <-sem }()
						if err := sinks[t].sink.Export(ctx, batches[t]); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
				b.ReportMetric(time.Since(start).Seconds(), "s/start")
			}
		})
	}
}
