package bigquery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
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
		rows[i].Inventory = inventory
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
	ctx := context.Background()
	ds := newDataset(t)
	east, rec := newSink(t, ds, "east")
	west, _ := newSink(t, ds, "west")
	old := time.Now().Add(-3 * time.Hour).UTC().Truncate(time.Microsecond)
	exportAt(t, east, "east", "apps", 5, old)
	exportAt(t, east, "east", "web", 3, old)
	exportAt(t, west, "west", "apps", 4, old)
	westBefore := everything(t, ds, "west")
	if tableCounts(t, ds, "west") != [3]int64{4, 1, 1} {
		t.Fatalf("west was not seeded:\n%s", westBefore)
	}

	w := export.Writer{Version: "v0.1.0", Instance: "kollect-system@east"}
	apps := sink.Holding{Inventory: "apps", Rows: 5, CoverageEntries: 1, StateRecords: 1, ChangedAt: old, ConfirmedAt: old, Writer: w}
	web := sink.Holding{Inventory: "web", Rows: 3, CoverageEntries: 1, StateRecords: 1, ChangedAt: old, ConfirmedAt: old, Writer: w}
	rec.Calls()
	got, err := east.Holdings(ctx, "east", "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []sink.Holding{apps, web}) {
		t.Fatalf("holdings of east:\n%+v\nwant\n%+v", got, []sink.Holding{apps, web})
	}
	if m := mutations(rec.Calls()); len(m) != 1 || m["query other"] != 3 {
		t.Fatalf("Holdings sent %v, want three read queries", m)
	}
	if got, err := east.Holdings(ctx, "nobody", ""); err != nil || len(got) != 0 {
		t.Fatalf("holdings of an unknown cluster: %+v, %v", got, err)
	}

	if _, err := east.Purge(ctx, "east", "", old.Add(-time.Minute)); !errors.Is(err, sink.ErrNotRetired) {
		t.Fatalf("purge with a cutoff before the last write: %v, want ErrNotRetired", err)
	}
	if got := tableCounts(t, ds, "east"); got != [3]int64{8, 2, 2} {
		t.Fatalf("a refused purge left east with %v", got)
	}
	if _, err := west.Purge(ctx, "east", "", time.Time{}); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("west's sink purging east: %v, want a terminal error", err)
	}

	rec.Calls()
	removed, err := east.Purge(ctx, "east", "web", old.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(removed, []sink.Holding{web}) {
		t.Fatalf("purge of east/web removed %+v, want %+v", removed, web)
	}
	if n := rec.Calls()["query script"]; n != 1 {
		t.Fatalf("the purge ran %d transactions, want one", n)
	}
	if got := tableCounts(t, ds, "east"); got != [3]int64{5, 1, 1} {
		t.Fatalf("after purging east/web east holds %v, want apps only", got)
	}

	removed, err = east.Purge(ctx, "east", "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(removed, []sink.Holding{apps}) {
		t.Fatalf("purge of east removed %+v, want %+v", removed, apps)
	}
	if got := tableCounts(t, ds, "east"); got != [3]int64{} {
		t.Fatalf("after the purge east holds %v", got)
	}
	if got := everything(t, ds, "west"); got != westBefore {
		t.Fatalf("the purge of east touched west:\nbefore %s\nafter  %s", westBefore, got)
	}
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
