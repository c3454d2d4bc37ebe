package sinks

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestFullObjectExport is issue 23 part 4 through the shipped kollect-agent: the documented
// example (docs/examples/full-objects.yaml) exports whole ConfigMaps into PostgreSQL, read back
// with psql. The noise is pruned (managedFields, resourceVersion, the last-applied annotation and
// the example's extra path); an object over maxBytes is exported cut, the row lists what was cut
// and the target reports it; and a change only to pruned fields rewrites no row, shown by the
// rows' xmin and the table's update counter around a real change exported after it.
func TestFullObjectExport(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, pgURL, _ := postgresCluster(t, ctx, "fullobject")
	c := cp.Client
	const ns = "docs-full"
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	small := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "small", Namespace: ns, Labels: map[string]string{"owner": "team-a"},
			Annotations: map[string]string{
				"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"ConfigMap"}`,
				"example.com/checksum":                             "1", "example.com/keep": "yes",
			}},
		Data: map[string]string{"mode": "fast"},
	}
	big := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns},
		Data:       map[string]string{"blob": strings.Repeat("x", 20<<10), "mode": "slow"},
	}
	must(t, c.Create(ctx, small))
	must(t, c.Create(ctx, big))
	applyFullObjectExample(t, ctx, c, ns, pgURL)

	a := newAgent(t, cp)
	a.start()
	db := &pgReader{url: pgURL}
	query := func(sql string) string {
		out, err := db.psql(ctx, sql)
		must(t, err)
		return strings.TrimSpace(out)
	}
	eventuallyT(t, 60*time.Second, "both ConfigMaps exported whole", func() (bool, string) {
		out, err := db.psql(ctx, `SELECT string_agg(name, ',' ORDER BY name) FROM team_a.rows
			WHERE namespace = 'docs-full' AND attributes ? 'object'`)
		return err == nil && strings.TrimSpace(out) == "big,small", fmt.Sprint(out, err, statusOf(ctx, c, ns))
	})

	// Pruned by default and by the example, kept otherwise.
	meta := query(`SELECT concat_ws(' ', attributes->'object'->'metadata' ? 'managedFields',
		attributes->'object'->'metadata' ? 'resourceVersion',
		attributes->'object'->'metadata'->'annotations' ? 'kubectl.kubernetes.io/last-applied-configuration',
		attributes->'object'->'metadata'->'annotations' ? 'example.com/checksum',
		attributes->'object'->'metadata'->'annotations'->>'example.com/keep',
		attributes->'object'->'data'->>'mode', attributes->>'owner', attributes ? 'objectTruncated')
		FROM team_a.rows WHERE name = 'small'`)
	if want := "f f f f yes fast team-a f"; meta != want {
		t.Fatalf("small ConfigMap: managedFields, resourceVersion, last-applied, checksum present, keep, mode, owner, truncated = %q, want %q", meta, want)
	}

	// Cut to maxBytes, and the row says what was cut.
	cut := query(`SELECT concat_ws(' ', attributes->'objectTruncated', attributes->'object'->'data' ? 'blob',
		attributes->'object'->'data'->>'mode', attributes->'object'->>'kind', attributes->'object'->'metadata'->>'name')
		FROM team_a.rows WHERE name = 'big'`)
	if want := `["data.blob"] f slow ConfigMap big`; cut != want {
		t.Fatalf("big ConfigMap: objectTruncated, blob present, mode, kind, name = %q, want %q", cut, want)
	}
	eventuallyT(t, 30*time.Second, "the target reports the cut", func() (bool, string) {
		tg := &kollectv1.KollectTarget{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "configmaps-whole"}, tg); err != nil {
			return false, err.Error()
		}
		for _, cond := range tg.Status.Conditions {
			if cond.Type == kollectv1.ConditionDegraded {
				ok := tg.Status.TruncatedCount == 1 && cond.Status == metav1.ConditionTrue && cond.Reason == kollectv1.ReasonObjectsTruncated &&
					strings.Contains(cond.Message, "docs-full/big: larger than maxBytes 8192, exported without data.blob")
				return ok, fmt.Sprintf("truncatedCount %d, %s %s: %s", tg.Status.TruncatedCount, cond.Status, cond.Reason, cond.Message)
			}
		}
		return false, fmt.Sprintf("no Degraded condition: %+v", tg.Status)
	})

	// A change to pruned fields only (new resourceVersion and managedFields) is no change to
	// the export: after it, a real change to the other object is exported, and only that row
	// is written.
	marks := func() string {
		return query(`SELECT string_agg(name || '@' || xmin::text, ',' ORDER BY name) FROM team_a.rows WHERE namespace = 'docs-full'`)
	}
	updates := func() string {
		return query(`SELECT n_tup_upd + n_tup_ins FROM pg_stat_user_tables WHERE schemaname = 'team_a' AND relname = 'rows'`)
	}
	// The counters catch up with the first export's two inserts before the window opens.
	eventuallyT(t, 10*time.Second, "the first export counted", func() (bool, string) {
		got := updates()
		return got == "2", got
	})
	before, writesBefore := marks(), updates()
	must(t, c.Get(ctx, client.ObjectKeyFromObject(small), small))
	small.Annotations["example.com/checksum"] = "2"
	must(t, c.Update(ctx, small))
	must(t, c.Get(ctx, client.ObjectKeyFromObject(big), big))
	big.Data["mode"] = "slower"
	must(t, c.Update(ctx, big))
	eventuallyT(t, 60*time.Second, "the real change exported", func() (bool, string) {
		out := query(`SELECT attributes->'object'->'data'->>'mode' FROM team_a.rows WHERE name = 'big'`)
		return out == "slower", out
	})
	after := marks()
	smallBefore, smallAfter := markOf(before, "small"), markOf(after, "small")
	if smallBefore != smallAfter || markOf(before, "big") == markOf(after, "big") {
		t.Fatalf("row versions %s -> %s: want only big rewritten", before, after)
	}
	// pg_stat counters are flushed at transaction end by the writing backend; poll until the
	// one write shows, then it must be exactly one.
	eventuallyT(t, 10*time.Second, "one row write counted", func() (bool, string) {
		got := updates()
		return got != writesBefore, got
	})
	var b, w int
	fmt.Sscan(writesBefore, &b)
	fmt.Sscan(updates(), &w)
	if w-b != 1 {
		t.Fatalf("%d row writes after a pruned-only change and one real change, want 1", w-b)
	}
}

func markOf(marks, name string) string {
	for _, m := range strings.Split(marks, ",") {
		if n, v, _ := strings.Cut(m, "@"); n == name {
			return v
		}
	}
	return ""
}

// applyFullObjectExample creates the documented example in ns instead of team-a, its sink
// pointed at the test's PostgreSQL instead of the example's placeholder host; that server
// serves no TLS, so ns is granted sslMode disable.
func applyFullObjectExample(t *testing.T, ctx context.Context, c client.Client, ns, pgURL string) {
	t.Helper()
	must(t, applyYAML(ctx, c, unverifiedGrant(ns)))
	raw, err := os.ReadFile("../../docs/examples/full-objects.yaml")
	must(t, err)
	u, err := url.Parse(pgURL)
	must(t, err)
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		obj := &unstructured.Unstructured{}
		must(t, yaml.Unmarshal([]byte(doc), &obj.Object))
		obj.SetNamespace(ns)
		switch obj.GetKind() {
		case "KollectScope":
			must(t, unstructured.SetNestedStringSlice(obj.Object, []string{ns}, "spec", "allowedNamespaces"))
		case "Secret":
			must(t, unstructured.SetNestedField(obj.Object, "postgres", "stringData", "username"))
		case "KollectDatabaseSink":
			port := int64(0)
			fmt.Sscan(u.Port(), &port)
			for field, v := range map[string]any{"host": u.Hostname(), "port": port, "database": strings.TrimPrefix(u.Path, "/"), "sslMode": "disable"} {
				must(t, unstructured.SetNestedField(obj.Object, v, "spec", "postgres", field))
			}
		}
		must(t, c.Create(ctx, obj))
	}
}

// statusOf says what the example's profile, target and inventory report, for failure messages.
func statusOf(ctx context.Context, c client.Client, ns string) string {
	key := client.ObjectKey{Namespace: ns, Name: "configmaps-whole"}
	p, tg, inv := &kollectv1.KollectProfile{}, &kollectv1.KollectTarget{}, &kollectv1.KollectInventory{}
	_ = c.Get(ctx, key, p)
	_ = c.Get(ctx, key, tg)
	_ = c.Get(ctx, key, inv)
	return fmt.Sprintf("profile %+v\ntarget %+v\ninventory %+v", p.Status.Conditions, tg.Status, inv.Status.Conditions)
}
