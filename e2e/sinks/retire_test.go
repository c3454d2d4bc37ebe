package sinks

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestDeletedInventoriesApplyTheirDeletionPolicy is issue 19 point 4 through the shipped
// kollect-agent, read with psql: two inventories share a PostgreSQL table. Deleting the one
// with deletionPolicy Delete removes its rows, coverage and state row and touches no row of the other
// (xmin unchanged); deleting the other (Retain, the default) leaves every row as it was and
// marks its coverage retired. Each deleted object goes once its sink took the last export.
func TestDeletedInventoriesApplyTheirDeletionPolicy(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, pgURL, _ := postgresCluster(t, ctx, "retire")
	c := cp.Client
	refs := kollectv1.ClusterSinkReferences{Database: []kollectv1.NamespacedObjectReference{{Name: "postgres", Namespace: sinkNS}}}
	keep := newInventory(refs)
	doomed := newInventory(refs)
	doomed.Name = "doomed"
	doomed.Spec.DeletionPolicy = kollectv1.DeletionDelete
	must(t, c.Create(ctx, keep))
	must(t, c.Create(ctx, doomed))
	a := newAgent(t, cp)
	a.start()

	want, err := expectedRows(ctx, c)
	must(t, err)
	db := &pgReader{url: pgURL}
	query := func(sql string) string {
		out, err := db.psql(ctx, sql)
		must(t, err)
		return strings.TrimSpace(out)
	}
	// count is -1 until the agent created the tables.
	count := func(table, inv string) int {
		out, err := db.psql(ctx, "SELECT count(*) FROM kollect."+table+" WHERE cluster = 'east' AND inventory = '"+inv+"'")
		if err != nil && strings.Contains(err.Error(), "does not exist") {
			return -1
		}
		must(t, err)
		n, err := strconv.Atoi(strings.TrimSpace(out))
		must(t, err)
		return n
	}
	// Both inventories export the same targets (rows are keyed by inventory too).
	eventuallyT(t, 60*time.Second, "both inventories' rows and coverage", func() (bool, string) {
		ok := true
		for _, inv := range []string{inventory, "doomed"} {
			ok = ok && count("rows", inv) == len(want) && count("rows_coverage", inv) == 3
		}
		return ok, strconv.Itoa(count("rows", inventory)) + " and " + strconv.Itoa(count("rows", "doomed")) + " rows"
	})
	keptRows := func() string {
		return query("SELECT string_agg(uid || '@' || xmin::text, ',' ORDER BY uid) FROM kollect.rows WHERE inventory = '" + inventory + "'")
	}
	before := keptRows()
	objectGone := func(obj client.Object) func() (bool, string) {
		return func() (bool, string) {
			err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			return apierrors.IsNotFound(err), "finalizers " + strings.Join(obj.GetFinalizers(), ",")
		}
	}

	// Delete: the rows and coverage of doomed leave the table, nothing else is written.
	must(t, c.Get(ctx, client.ObjectKeyFromObject(doomed), doomed))
	if !strings.Contains(strings.Join(doomed.Finalizers, ","), kollectv1.FinalizerRetire) {
		t.Fatalf("the agent did not put %s on the inventory: %v", kollectv1.FinalizerRetire, doomed.Finalizers)
	}
	must(t, c.Delete(ctx, doomed))
	eventuallyT(t, 30*time.Second, "doomed's rows and coverage removed", func() (bool, string) {
		r, cv := count("rows", "doomed"), count("rows_coverage", "doomed")
		return r == 0 && cv == 0, strconv.Itoa(r) + " rows, " + strconv.Itoa(cv) + " coverage entries"
	})
	eventuallyT(t, 20*time.Second, "the deleted inventory doomed to go", objectGone(doomed))
	// The state row goes too (the agent purges the inventory once the empty export is in):
	// a deleted inventory leaves nothing, and the other's state row stays.
	if n, kept := count("rows_state", "doomed"), count("rows_state", inventory); n != 0 || kept != 1 {
		t.Fatalf("after doomed went: %d state rows of doomed (want 0), %d of %s (want 1)", n, kept, inventory)
	}
	if after := keptRows(); after != before {
		t.Fatalf("deleting doomed rewrote rows of %s:\n%s\n->\n%s", inventory, before, after)
	}

	// Retain: every row stays as it was, every target's coverage says retired.
	must(t, c.Delete(ctx, keep))
	eventuallyT(t, 30*time.Second, inventory+"'s coverage retired", func() (bool, string) {
		got := query("SELECT string_agg(DISTINCT state, ',') FROM kollect.rows_coverage WHERE inventory = '" + inventory + "'")
		return got == "retired", got
	})
	eventuallyT(t, 20*time.Second, "the deleted inventory "+inventory+" to go", objectGone(keep))
	if after := keptRows(); after != before {
		t.Fatalf("deleting %s with deletionPolicy Retain rewrote its rows:\n%s\n->\n%s", inventory, before, after)
	}
	if got := query("SELECT DISTINCT coverage_state FROM kollect.rows_covered WHERE inventory = '" + inventory + "'"); got != "retired" {
		t.Fatalf("rows_covered says %q for the retained rows, want retired", got)
	}
}
