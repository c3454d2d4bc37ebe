package sinks

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestUnknownTargetIsMarkedNotDeleted is issue 19 point 2 through the shipped kollect-agent:
// PostgreSQL (read with psql) holds every target's coverage beside the rows; when a target's
// kind stops being served, its rows stay exactly as they were (xmin unchanged) and its coverage
// entry says kindNotServed with the reason, in the table, in the <table>_covered view and in
// the agent's kollect_inventory_target_coverage metric.
func TestUnknownTargetIsMarkedNotDeleted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, pgURL, pgs := postgresCluster(t, ctx, "coverage")
	c := cp.Client
	inv := newInventory(kollectv1.ClusterSinkReferences{Database: []kollectv1.NamespacedObjectReference{{Name: "postgres", Namespace: sinkNS}}})
	must(t, c.Create(ctx, inv))
	a := newAgent(t, cp)
	a.start()

	want, err := expectedRows(ctx, c)
	must(t, err)
	waitRows(t, ctx, []*sinkUnderTest{pgs}, want, "the initial export")
	db := &pgReader{url: pgURL}
	perTarget := map[string]int{}
	for _, r := range want {
		perTarget[r.Target]++
	}
	coverage := func() string {
		out, err := db.psql(ctx, `SELECT string_agg(target || '=' || state || '/' || rows, ' ' ORDER BY target)
			FROM kollect.rows_coverage WHERE cluster = 'east' AND inventory = 'fleet'`)
		must(t, err)
		return strings.TrimSpace(out)
	}
	complete := fmt.Sprintf("configmaps=complete/%d deployments=complete/%d services=complete/%d",
		perTarget["configmaps"], perTarget["deployments"], perTarget["services"])
	eventuallyT(t, 20*time.Second, "every target complete in rows_coverage", func() (bool, string) {
		got := coverage()
		return got == complete, got
	})
	services := func() string {
		out, err := db.psql(ctx, `SELECT string_agg(uid || '@' || xmin::text, ',' ORDER BY uid) FROM kollect.rows WHERE target = 'services'`)
		must(t, err)
		return out
	}
	before := services()

	// The services' profile now names a kind this cluster does not serve.
	p := &kollectv1.KollectProfile{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: sinkNS, Name: "services"}, p))
	p.Spec.Target.Kind = "ServiceNotServed"
	must(t, c.Update(ctx, p))
	unserved := strings.Replace(complete, "services=complete", "services=kindNotServed", 1)
	eventuallyT(t, 60*time.Second, "services kindNotServed in rows_coverage", func() (bool, string) {
		got := coverage()
		return got == unserved, got
	})
	if after := services(); after != before {
		t.Fatalf("the services' rows were rewritten or deleted when their kind stopped being served:\n%s\n->\n%s", before, after)
	}
	out, err := db.psql(ctx, `SELECT DISTINCT coverage_state || ': ' || coverage_reason FROM kollect.rows_covered WHERE target = 'services'`)
	must(t, err)
	if got := strings.TrimSpace(out); !strings.HasPrefix(got, "kindNotServed: ") || len(got) < len("kindNotServed: ")+10 {
		t.Fatalf("rows_covered says %q for the services' rows, want kindNotServed with a reason", got)
	}
	eventuallyT(t, 20*time.Second, "the coverage metric", func() (bool, string) {
		m, err := a.scrape("kollect_inventory_target_coverage{")
		must(t, err)
		return m[`kollect_inventory_target_coverage{inventory="fleet",state="kindNotServed",target="services"}`] == 1 &&
			m[`kollect_inventory_target_coverage{inventory="fleet",state="complete",target="services"}`] == 0, fmt.Sprint(m)
	})
}

// eventuallyT polls cond every 250 ms until it holds or timeout passes.
func eventuallyT(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, detail)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
