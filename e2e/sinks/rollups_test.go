package sinks

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// rollupExample is the documented rollup example (docs/rollups.md).
const rollupExample = "../../docs/examples/rollups.yaml"

// TestRollupsOfTheDocsExampleThroughTheShippedAgent applies the profile, target and inventory
// of docs/examples/rollups.yaml (its sink pointed at the suite's PostgreSQL) and runs the
// shipped kollect-agent: psql finds the rollup rows, equal to totals computed from the
// Deployments read from the control plane, and no Deployment row (rawRows: Exclude). A change
// that keeps every total (a Deployment's strategy) and then one that changes one team's
// replicas rewrite exactly that team's row: the other rollup rows keep their xmin and the
// table's n_tup_upd grows by one.
func TestRollupsOfTheDocsExampleThroughTheShippedAgent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, pgURL, _ := postgresCluster(t, ctx, "rollups")
	c := cp.Client
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kollect-system"}}))
	raw, err := os.ReadFile(rollupExample)
	must(t, err)
	var docs []string
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		switch {
		case strings.Contains(doc, "kind: KollectClusterInventory"):
			// The example's sink is a cluster's; the suite's PostgreSQL is sink postgres.
			doc = strings.Replace(doc, "{name: totals-pg, namespace: kollect-system}", "{name: postgres, namespace: "+sinkNS+"}", 1)
			doc += "\n  confirmInterval: 0s\n  debounce: 200ms\n  maxDelay: 2s\n"
		case strings.Contains(doc, "kind: Secret"), strings.Contains(doc, "kind: KollectDatabaseSink"):
			continue
		}
		docs = append(docs, doc)
	}
	must(t, applyYAML(ctx, c, strings.Join(docs, "\n---\n")))
	newAgent(t, cp).start()

	db := &pgReader{url: pgURL}
	// query returns psql's output, or its error while the sink has not created the table yet.
	query := func(sql string) string {
		out, err := db.psql(ctx, sql)
		if err != nil {
			return err.Error()
		}
		return strings.TrimSpace(out)
	}
	read := func() string {
		return query(`SELECT target, coalesce(namespace, ''), name, attributes->>'count', coalesce(attributes->'sum'->>'replicas', '-')
			FROM kollect.rows WHERE cluster = 'east' AND inventory = 'fleet-totals' ORDER BY target COLLATE "C", name COLLATE "C"`)
	}
	eventuallyT(t, 60*time.Second, "the rollup rows, equal to the Deployments' totals", func() (bool, string) {
		got, want := read(), expectedTotals(t, ctx, c)
		return got == want, "psql:\n" + got + "\nwant:\n" + want
	})
	if n := query(`SELECT count(*) FROM kollect.rows WHERE inventory = 'fleet-totals' AND kind <> 'Rollup'`); n != "0" {
		t.Fatalf("%s Deployment rows exported with rawRows: Exclude", n)
	}
	totals := expectedTotals(t, ctx, c)
	groups := strings.Count(totals, "\n") + 1
	images := strings.Count(totals, "images-per-namespace\t")
	if got, want := query(`SELECT target || '=' || state || '/' || rows FROM kollect.rows_coverage WHERE inventory = 'fleet-totals' ORDER BY target`),
		fmt.Sprintf("images-per-namespace=complete/%d\nreplicas-per-team=complete/%d\ntotals-deployments=complete/0", images, groups-images); got != want {
		t.Fatalf("coverage:\n%s\nwant\n%s", got, want)
	}

	marks := func() map[string]string {
		out := map[string]string{}
		for _, line := range strings.Split(query(`SELECT target || '/' || name, xmin::text FROM kollect.rows WHERE inventory = 'fleet-totals'`), "\n") {
			k, v, _ := strings.Cut(line, "\t")
			out[k] = v
		}
		return out
	}
	updates := func() string {
		return query(`SELECT n_tup_upd FROM pg_stat_user_tables WHERE schemaname = 'kollect' AND relname = 'rows'`)
	}
	// The counters settle a little after the writers commit: the first export inserted each
	// group once and updated nothing.
	eventuallyT(t, 20*time.Second, "n_tup_upd of the first export", func() (bool, string) {
		got := query(`SELECT n_tup_ins || ' ' || n_tup_upd FROM pg_stat_user_tables WHERE schemaname = 'kollect' AND relname = 'rows'`)
		return got == fmt.Sprintf("%d 0", groups), got
	})
	before := marks()

	update := func(ns, name string, mutate func(*appsv1.Deployment)) {
		d := &appsv1.Deployment{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d))
		mutate(d)
		must(t, c.Update(ctx, d))
	}
	// No total changes with the strategy; then team-b's api gains a replica.
	update("team-b", "worker", func(d *appsv1.Deployment) {
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	})
	update("team-b", "api", func(d *appsv1.Deployment) { *d.Spec.Replicas++ })
	eventuallyT(t, 30*time.Second, "team-b's new replica total", func() (bool, string) {
		got, want := read(), expectedTotals(t, ctx, c)
		return got == want, "psql:\n" + got + "\nwant:\n" + want
	})
	after := marks()
	for k, v := range before {
		if changed := after[k] != v; changed != (k == "replicas-per-team/team-b") {
			t.Errorf("row %s: xmin %s -> %s; only replicas-per-team/team-b may be rewritten", k, v, after[k])
		}
	}
	eventuallyT(t, 20*time.Second, "n_tup_upd to count the one rewritten row", func() (bool, string) {
		got := updates()
		return got == "1", got
	})
}

// expectedTotals computes the example's rollup rows from the Deployments as the control plane
// holds them, in the order read() prints them.
func expectedTotals(t *testing.T, ctx context.Context, c client.Client) string {
	var list appsv1.DeploymentList
	must(t, c.List(ctx, &list))
	images := map[[2]string]int{}
	teams := map[string][2]int{}
	for _, d := range list.Items {
		seen := map[string]bool{}
		for _, ctr := range d.Spec.Template.Spec.Containers {
			if !seen[ctr.Image] {
				seen[ctr.Image] = true
				images[[2]string{d.Namespace, ctr.Image}]++
			}
		}
		tt := teams[d.Labels["team"]]
		tt[0]++
		tt[1] += int(*d.Spec.Replicas)
		teams[d.Labels["team"]] = tt
	}
	var lines []string
	for k, n := range images {
		lines = append(lines, fmt.Sprintf("images-per-namespace\t%s\t%s/%s\t%d\t-", k[0], k[0], k[1], n))
	}
	for team, tt := range teams {
		lines = append(lines, fmt.Sprintf("replicas-per-team\t\t%s\t%d\t%d", team, tt[0], tt[1]))
	}
	sort.Strings(lines) // target, then name: the tab sorts before every printable character
	return strings.Join(lines, "\n")
}
