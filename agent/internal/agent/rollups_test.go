package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestRollupsBesideAndInsteadOfRawRowsInPostgres runs the agent with the real PostgreSQL sink
// and two inventories over one ConfigMap target, both with the rollup per-color (count and
// the sum of keys per color): "beside" exports the raw rows too, "instead" (rawRows Exclude)
// only the rollup rows. A change that leaves every total alone rewrites no rollup row (their
// xmin stays) and, in "instead", writes no row at all: the table's update counter
// (pg_stat_user_tables.n_tup_upd) grows by the one raw row of "beside" only.
func TestRollupsBesideAndInsteadOfRawRowsInPostgres(t *testing.T) {
	t.Parallel()
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	ns := namespace(t, "rollups")
	allowUnverifiedSinks(t, cp.Client, ns) // the test PostgreSQL is plaintext
	objs := configMapInventory(ns, 200*time.Millisecond, 2*time.Second)
	profile := objs[0].(*kollectv1.KollectProfile)
	profile.Spec.Attributes = append(profile.Spec.Attributes, kollectv1.Attribute{Name: "size", JSONPath: "{.data.size}", Optional: true})
	perColor := kollectv1.Rollup{Name: "per-color", GroupBy: []string{"color"}, Sum: []string{"keys", "color"}}
	inventory := func(name string, raw kollectv1.RawRows) *kollectv1.KollectInventory {
		return &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectInventorySpec{
			Targets:          []kollectv1.LocalObjectReference{{Name: "cm"}},
			Sinks:            kollectv1.SinkReferences{Database: []kollectv1.LocalObjectReference{{Name: "db"}}},
			ExportTiming:     kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: 200 * time.Millisecond}, MaxDelay: metav1.Duration{Duration: 2 * time.Second}},
			InventoryRollups: kollectv1.InventoryRollups{Rollups: []kollectv1.Rollup{perColor}, RawRows: raw},
		}}
	}
	create(t, profile, objs[1],
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}, StringData: map[string]string{"username": "postgres", "password": "unused"}},
		&kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: kollectv1.KollectDatabaseSinkSpec{
			Type: kollectv1.DatabaseSinkPostgres, Timeout: metav1.Duration{Duration: 30 * time.Second},
			Postgres: &kollectv1.PostgresSinkConfig{Host: "127.0.0.1", Port: int32(pg.Port), Database: "postgres", Schema: "kollect",
				Table: "rows", SSLMode: "disable", SecretRef: kollectv1.SecretReference{Name: "pg"},
				StatementTimeout: metav1.Duration{Duration: 10 * time.Second}, MaxConnections: 2}}},
		configMap(ns, "a", map[string]string{"color": "red", "size": "s"}),
		configMap(ns, "b", map[string]string{"color": "red", "x": "1"}),
		configMap(ns, "c", map[string]string{"color": "blue"}),
		inventory("beside", ""), inventory("instead", kollectv1.RawRowsExclude))
	startAgentWith(t, nil, "c-rollups", ns, nil)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	query := func(sql string, args ...any) string {
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			return err.Error()
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return err.Error()
			}
			lines = append(lines, strings.Trim(fmt.Sprint(vals), "[]"))
		}
		return strings.Join(lines, "\n")
	}
	content := func(inv string) string {
		return query(`SELECT target, kind, name, coalesce(attributes->'group'->>'color', attributes->>'size', '-'),
			coalesce(attributes->>'count', '-'), coalesce(attributes->'sum'->>'keys', '-')
			FROM kollect.rows WHERE inventory = $1 ORDER BY target, name`, ns+"/"+inv)
	}
	red := "per-color Rollup red red 2 4" // target kind name group.color count sum.keys
	blue := "per-color Rollup blue blue 1 1"
	rollups := blue + "\n" + red
	eventually(t, 60*time.Second, "the rollup rows alone in instead", func() (bool, string) {
		got := content("instead")
		return got == rollups, got
	})
	eventually(t, 30*time.Second, "raw rows and rollup rows in beside", func() (bool, string) {
		got := content("beside")
		return strings.HasPrefix(got, rollups+"\n") && strings.Count(got, " ConfigMap ") == 3, got
	})
	// Sums of a non-number (color) are skipped, counted in the rollup's coverage, and the
	// export goes on; coverage lists the raw target with no rows where they are excluded.
	coverage := func(inv string) string {
		return query(`SELECT target, state, rows, extraction_errors FROM kollect.rows_coverage WHERE inventory = $1 ORDER BY target`, ns+"/"+inv)
	}
	if got, want := coverage("instead"), "per-color complete 2 3\n"+ns+"/cm complete 0 0"; got != want {
		t.Fatalf("coverage of instead:\n%s\nwant\n%s", got, want)
	}
	if got, want := coverage("beside"), "per-color complete 2 3\n"+ns+"/cm complete 3 0"; got != want {
		t.Fatalf("coverage of beside:\n%s\nwant\n%s", got, want)
	}

	marks := func() string {
		return query(`SELECT inventory, name, xmin::text FROM kollect.rows WHERE target = 'per-color' ORDER BY inventory, name`)
	}
	counters := func() (ins, upd int64) {
		_ = conn.QueryRow(ctx, `SELECT n_tup_ins, n_tup_upd FROM pg_stat_user_tables WHERE schemaname = 'kollect' AND relname = 'rows'`).Scan(&ins, &upd)
		return ins, upd
	}
	// The counters are flushed by the writers' sessions a little after they commit: wait for
	// them to add up to the rows written so far (3 + 2 + 2), then take the marks.
	eventually(t, 30*time.Second, "the counters to count the first exports", func() (bool, string) {
		ins, upd := counters()
		return ins == 7 && upd == 0, fmt.Sprintf("ins %d upd %d", ins, upd)
	})
	before := marks()

	// a's size changes: its raw row does, no total does. Then d (green) is created: every
	// inventory exports once more, a build that includes a's change (the watch delivers in
	// order), so the window closes on an observed event.
	set := func(name string, data map[string]string) {
		cm := &corev1.ConfigMap{}
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
			t.Fatal(err)
		}
		cm.Data = data
		if err := cp.Client.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	set("a", map[string]string{"color": "red", "size": "m"})
	create(t, configMap(ns, "d", map[string]string{"color": "green"}))
	green := "per-color Rollup green green 1 1"
	eventually(t, 30*time.Second, "the green group in instead", func() (bool, string) {
		got := content("instead")
		return got == blue+"\n"+green+"\n"+red, got
	})
	eventually(t, 30*time.Second, "the green group and a's new size in beside", func() (bool, string) {
		got := content("beside")
		return strings.Contains(got, green) && strings.Contains(got, " ConfigMap a m - -") && strings.Count(got, " ConfigMap ") == 4, got
	})
	after := marks()
	for _, line := range strings.Split(before, "\n") {
		if !strings.Contains(after, line) {
			t.Errorf("rollup row rewritten by a change that kept its total: before %q, after\n%s", line, after)
		}
	}
	// Inserts: d in beside and the green row in both; updates: a's raw row in beside alone.
	eventually(t, 30*time.Second, "the counters to count the second exports", func() (bool, string) {
		ins, upd := counters()
		return ins == 10 && upd == 1, fmt.Sprintf("ins %d upd %d (want 10 and 1)", ins, upd)
	})
}
