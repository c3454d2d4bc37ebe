package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestQuietInventoryIsConfirmedWithoutRowWrites: with nothing changing, the agent confirms
// its PostgreSQL sink every confirmInterval (10 s, the minimum): the inventory's
// lastConfirmTime and the state row's confirmed_at move past the last export, while
// exported_at and every row stay as they were (no row has a new xmin).
func TestQuietInventoryIsConfirmedWithoutRowWrites(t *testing.T) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	ctx := context.Background()
	ns := namespace(t, "confirm")
	allowUnverifiedSinks(t, cp.Client, ns) // postgresSink: sslMode disable
	create(t, postgresSink(ns, "db", "confirm", pg.Port)...)
	objs := colorInventory(ns, kollectv1.SinkReferences{Database: []kollectv1.LocalObjectReference{{Name: "db"}}})
	inv := objs[len(objs)-1].(*kollectv1.KollectInventory)
	inv.Spec.ConfirmInterval = &metav1.Duration{Duration: 10 * time.Second}
	create(t, objs...)
	create(t, configMap(ns, "a", map[string]string{"color": "red"}), configMap(ns, "b", map[string]string{"color": "blue"}))
	startAgentWith(t, nil, "c-confirm", ns, nil)

	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	type state struct {
		exported, confirmed time.Time
		xmins               string
	}
	read := func() (state, error) {
		var s state
		if err := conn.QueryRow(ctx, `SELECT exported_at, confirmed_at FROM confirm.rows_state WHERE cluster = 'c-confirm'`).
			Scan(&s.exported, &s.confirmed); err != nil {
			return s, err
		}
		err := conn.QueryRow(ctx, `SELECT string_agg(name || '@' || xmin::text, ',' ORDER BY name) FROM confirm.rows WHERE cluster = 'c-confirm'`).Scan(&s.xmins)
		return s, err
	}
	var first state
	eventually(t, 60*time.Second, "the first export", func() (bool, string) {
		s, err := read()
		if err != nil {
			return false, err.Error()
		}
		first = s
		return s.xmins != "" && s.confirmed.Equal(s.exported), fmt.Sprintf("%+v", s)
	})

	var now state
	eventually(t, 40*time.Second, "a confirmation", func() (bool, string) {
		s, err := read()
		if err != nil {
			return false, err.Error()
		}
		now = s
		return s.confirmed.After(first.confirmed.Add(9 * time.Second)), fmt.Sprintf("%+v", s)
	})
	if !now.exported.Equal(first.exported) || now.xmins != first.xmins {
		t.Fatalf("the confirmation rewrote data: exported_at %v -> %v, rows %s -> %s", first.exported, now.exported, first.xmins, now.xmins)
	}
	eventually(t, 20*time.Second, "lastConfirmTime past lastExportTime in status", func() (bool, string) {
		_ = cp.Client.Get(ctx, client.ObjectKeyFromObject(inv), inv)
		if len(inv.Status.Sinks) != 1 {
			return false, fmt.Sprintf("%+v", inv.Status.Sinks)
		}
		s := inv.Status.Sinks[0]
		return s.LastConfirmTime != nil && s.LastExportTime != nil && s.LastConfirmTime.Time.After(s.LastExportTime.Add(9*time.Second)),
			fmt.Sprintf("%+v", s)
	})

	// Idle, the inventory's status is written once per confirmation and at no other time
	// (docs/operations.md, "Conditions"): from one confirmation in status to the next, the API
	// server serves exactly one status write of kollectinventories, the one recording it. Each
	// end of the window is read between two equal counts, so no write falls between the
	// reading of the count and of the status.
	confirmedAt := func() (writes int, at time.Time) {
		for {
			before, err := cp.StatusWrites(ctx, "kollectinventories")
			if err != nil {
				t.Fatal(err)
			}
			if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(inv), inv); err != nil {
				t.Fatal(err)
			}
			after, err := cp.StatusWrites(ctx, "kollectinventories")
			if err != nil {
				t.Fatal(err)
			}
			if before == after {
				return after, inv.Status.Sinks[0].LastConfirmTime.Time
			}
		}
	}
	from, t1 := confirmedAt()
	var to int
	eventually(t, 40*time.Second, "the next confirmation in status", func() (bool, string) {
		var t2 time.Time
		to, t2 = confirmedAt()
		return t2.After(t1), t2.String()
	})
	if to-from != 1 {
		t.Fatalf("%d status writes of kollectinventories from one confirmation to the next, want 1 (the confirmation's)", to-from)
	}
}

// postgresSink is a KollectDatabaseSink named name writing to schema.rows of the test server
// on port, with the Secret it reads.
// postgresSink is a sink to the test PostgreSQL, which serves no TLS: its sslMode disable
// needs a KollectClusterScope with allowInsecureSkipVerify (allowUnverifiedSinks).
func postgresSink(ns, name, schema string, port int) []client.Object {
	return []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-pg"}, StringData: map[string]string{"username": "postgres", "password": "unused"}},
		&kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kollectv1.KollectDatabaseSinkSpec{
			Type: kollectv1.DatabaseSinkPostgres, Timeout: metav1.Duration{Duration: 10 * time.Second},
			Postgres: &kollectv1.PostgresSinkConfig{Host: "127.0.0.1", Port: int32(port), Database: "postgres", Schema: schema,
				Table: "rows", SSLMode: "disable", SecretRef: kollectv1.SecretReference{Name: name + "-pg"}}}},
	}
}
