package bigquery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// exportAt exports n rows of cluster's inventory, with their coverage entry, as an agent did
// at the time at.
func exportAt(t *testing.T, s *Sink, cluster, inventory string, n int, at time.Time) {
	t.Helper()
	a := &agent{sink: s, cluster: cluster, inventory: inventory,
		writer:   export.Writer{Version: "v0.1.0", Instance: "kollect-system@" + cluster},
		coverage: []export.Coverage{sinktest.Complete("deployments", int64(n))}}
	rows := mkRows(cluster, n, 1)
	for i := range rows {
		rows[i] = rows[i].With(func(o *export.Origin) { o.Inventory = inventory })
		rows[i].UID = inventory + "-" + rows[i].UID
	}
	b := a.batch(rows)
	b.Envelope.ExportedAt = at
	if err := s.Export(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// tableCounts is a cluster's rows, coverage entries and state rows in dataset.
func tableCounts(t *testing.T, dataset, cluster string) [3]int64 {
	t.Helper()
	var out [3]int64
	for i, table := range []string{"rows", "rows_coverage", "rows_state"} {
		out[i] = query(t, fmt.Sprintf("SELECT COUNT(*) FROM `%s.%s.%s` WHERE cluster = '%s'", server.Project, dataset, table, cluster))[0][0].(int64)
	}
	return out
}

// everything is every row, coverage entry and state row of a cluster with its times: any
// rewrite or removal changes it.
func everything(t *testing.T, dataset, cluster string) string {
	t.Helper()
	out := fmt.Sprintf("rows %v\n", rowsOf(t, dataset, cluster))
	out += fmt.Sprintf("coverage %v\n", query(t, fmt.Sprintf("SELECT inventory, target, state, row_count, updated_at FROM `%s.%s.rows_coverage`"+
		" WHERE cluster = '%s' ORDER BY inventory, target", server.Project, dataset, cluster)))
	out += fmt.Sprintf("state %v\n", query(t, fmt.Sprintf("SELECT inventory, checksum, exported_at, confirmed_at FROM `%s.%s.rows_state`"+
		" WHERE cluster = '%s' ORDER BY inventory", server.Project, dataset, cluster)))
	return out
}

// TestPurgeRemovesOneClusterOnly: Holdings reports per inventory what the tables hold; a
// cutoff before the agent's last write refuses and removes nothing; a purge of one
// inventory, then of the rest, removes exactly that cluster's rows, coverage and state in
// one transaction and reports it, while the other cluster's rows stay as they were.
func TestPurgeRemovesOneClusterOnly(t *testing.T) {
	ds := newDataset(t)
	east, rec := newSink(t, ds, "east")
	west, _ := newSink(t, ds, "west")
	sinks := map[string]*Sink{"east": east, "west": west}
	sinktest.PurgeContract(t, sinktest.PurgeCase{East: east, West: west, Precision: time.Microsecond,
		Export: func(cluster, inventory string, n int, at time.Time) {
			exportAt(t, sinks[cluster], cluster, inventory, n, at)
		},
		Held:        func(cluster string) [3]int64 { return tableCounts(t, ds, cluster) },
		Fingerprint: func(cluster string) string { return everything(t, ds, cluster) },
		// What the sink sent: Holdings reads with three queries, a purge is one transaction.
		Before: func(string) { rec.Calls() },
		After: func(step string) {
			calls := rec.Calls()
			if m := mutations(calls); step == "holdings" && (len(m) != 1 || m["query other"] != 3) {
				t.Fatalf("Holdings sent %v, want three read queries", m)
			}
			if n := calls["query script"]; step == "purge web" && n != 1 {
				t.Fatalf("the purge ran %d transactions, want one", n)
			}
		},
	})
}

// hookTransport runs before, once, ahead of the first request of a kind.
type hookTransport struct {
	base   http.RoundTripper
	kind   string
	before func()
}

func (h *hookTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if k, err := kind(r); err == nil && k == h.kind && h.before != nil {
		h.before()
		h.before = nil
	}
	return h.base.RoundTrip(r)
}

// TestPurgeSparesAStateConfirmedSinceHoldings: the cutoff is in the transaction's DELETEs,
// so an agent that confirmed after Holdings read its state keeps everything, and Purge says
// so.
func TestPurgeSparesAStateConfirmedSinceHoldings(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	seed, _ := newSink(t, ds, "east")
	exportAt(t, seed, "east", "apps", 5, time.Now().Add(-3*time.Hour))
	confirmed := false
	hook := &hookTransport{kind: "query script", before: func() {
		confirmed = true
		query(t, fmt.Sprintf("UPDATE `%s.%s.rows_state` SET confirmed_at = CURRENT_TIMESTAMP() WHERE cluster = 'east'", server.Project, ds))
	}}
	s, err := open(ctx, spec(ds), sink.Env{Cluster: "east", Namespace: "kollect", Name: "bq", Log: logr.Discard()},
		func(base http.RoundTripper) http.RoundTripper { hook.base = base; return hook })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	removed, err := s.Purge(ctx, "east", "", time.Now().Add(-time.Hour))
	if !confirmed {
		t.Fatal("the purge ran no transaction")
	}
	if !errors.Is(err, sink.ErrNotRetired) || len(removed) != 0 {
		t.Fatalf("purge of a state confirmed meanwhile: removed %+v, %v; want nothing and ErrNotRetired", removed, err)
	}
	if got := tableCounts(t, ds, "east"); got != [3]int64{5, 1, 1} {
		t.Fatalf("east holds %v after a refused purge", got)
	}
}
