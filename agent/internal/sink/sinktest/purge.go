package sinktest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// PurgeCase is one shared sink's side of the purge contract, run by PurgeContract: two
// agents' sinks (clusters east and west) over one server. The databases, the object stores
// and the event sinks run it.
type PurgeCase struct {
	East, West sink.Purger
	// Export writes n Deployments of cluster's inventory, with one coverage entry, as the
	// agent "kollect-system@<cluster>" (version v0.1.0) did at the time at.
	Export func(cluster, inventory string, n int, at time.Time)
	// Precision is what the server keeps of a time (a microsecond, a millisecond in BSON).
	Precision time.Duration
	// Held counts a cluster's rows, coverage entries and state records on the server, as
	// the server (or a client of it) tells; an object store counts documents for rows (its
	// case lays out one document per row).
	Held func(cluster string) [3]int64
	// Objects is the Holding.Objects of an inventory of n rows; nil for a database (0).
	Objects func(n int) int
	// Fingerprint changes when any record of the cluster is rewritten or removed.
	Fingerprint func(cluster string) string
	// Before and After run around the steps "holdings" and "purge web", for checks of what
	// the sink sent (requests, transactions).
	Before, After func(step string)
}

// PurgeContract: Holdings reports per inventory what the sink holds; a cutoff before the
// agent's last write refuses and removes nothing; an agent's sink purges its own cluster
// only; a purge of one inventory, then of the rest, removes exactly that cluster's rows,
// coverage and state and reports it, while the other cluster's records stay untouched.
func PurgeContract(t *testing.T, c PurgeCase) {
	t.Helper()
	ctx := context.Background()
	step := func(hook func(string), name string) {
		if hook != nil {
			hook(name)
		}
	}
	old := time.Now().Add(-3 * time.Hour).UTC().Truncate(c.Precision)
	c.Export("east", "apps", 5, old)
	c.Export("east", "web", 3, old)
	c.Export("west", "apps", 4, old)
	westBefore := c.Fingerprint("west")
	if westBefore == "" || c.Held("west") != [3]int64{4, 1, 1} {
		t.Fatalf("west was not seeded: %q", westBefore)
	}

	w := export.Writer{Version: "v0.1.0", Instance: "kollect-system@east"}
	objects := func(n int) int {
		if c.Objects == nil {
			return 0
		}
		return c.Objects(n)
	}
	apps := sink.Holding{Inventory: "apps", Rows: 5, CoverageEntries: 1, StateRecords: 1, Objects: objects(5), ChangedAt: old, ConfirmedAt: old, Writer: w}
	web := sink.Holding{Inventory: "web", Rows: 3, CoverageEntries: 1, StateRecords: 1, Objects: objects(3), ChangedAt: old, ConfirmedAt: old, Writer: w}
	step(c.Before, "holdings")
	got, err := c.East.Holdings(ctx, "east", "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []sink.Holding{apps, web}) {
		t.Fatalf("holdings of east:\n%+v\nwant\n%+v", got, []sink.Holding{apps, web})
	}
	step(c.After, "holdings")
	if got, err := c.East.Holdings(ctx, "east", "web"); err != nil || !reflect.DeepEqual(got, []sink.Holding{web}) {
		t.Fatalf("holdings of east/web: %+v, %v", got, err)
	}
	if got, err := c.East.Holdings(ctx, "nobody", ""); err != nil || len(got) != 0 {
		t.Fatalf("holdings of an unknown cluster: %+v, %v", got, err)
	}

	// The agent wrote after this cutoff: nothing goes.
	if _, err := c.East.Purge(ctx, "east", "", old.Add(-time.Minute)); !errors.Is(err, sink.ErrNotRetired) {
		t.Fatalf("purge with a cutoff before the last write: %v, want ErrNotRetired", err)
	}
	if got := c.Held("east"); got != [3]int64{8, 2, 2} {
		t.Fatalf("a refused purge left east with %v", got)
	}
	if _, err := c.West.Purge(ctx, "east", "", time.Time{}); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("west's sink purging east: %v, want a terminal error", err)
	}

	step(c.Before, "purge web")
	removed, err := c.East.Purge(ctx, "east", "web", old.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(removed, []sink.Holding{web}) {
		t.Fatalf("purge of east/web removed %+v, want %+v", removed, web)
	}
	step(c.After, "purge web")
	if got := c.Held("east"); got != [3]int64{5, 1, 1} {
		t.Fatalf("after purging east/web east holds %v, want apps only", got)
	}

	removed, err = c.East.Purge(ctx, "east", "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(removed, []sink.Holding{apps}) {
		t.Fatalf("purge of east removed %+v, want %+v", removed, apps)
	}
	if got := c.Held("east"); got != [3]int64{} {
		t.Fatalf("after the purge east holds %v", got)
	}
	if got := c.Fingerprint("west"); got != westBefore {
		t.Fatalf("the purge of east touched west:\nbefore %s\nafter  %s", westBefore, got)
	}
	if removed, err := c.East.Purge(ctx, "east", "", time.Time{}); err != nil || len(removed) != 0 {
		t.Fatalf("purging a purged cluster: %+v, %v", removed, err)
	}
}
