package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/export"
	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// colorInventory declares a ConfigMap profile and target and an inventory exporting to the
// given sink references.
func colorInventory(ns string, sinkRefs kollectv1.SinkReferences) []client.Object {
	objs := configMapInventory(ns, 300*time.Millisecond, 3*time.Second)
	inv := objs[3].(*kollectv1.KollectInventory)
	inv.Spec.Sinks = sinkRefs
	return []client.Object{objs[0], objs[1], inv}
}

// TestNATSReceivesUpsertUpsertDeleteThroughTheAgent runs the real agent with the real NATS
// sink: creating, changing and deleting an object yields upsert, upsert, delete for its key,
// in order, and the KV bucket ends without the key.
func TestNATSReceivesUpsertUpsertDeleteThroughTheAgent(t *testing.T) {
	t.Parallel()
	srv, err := testenv.StartNATS(testenv.NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ns := namespace(t, "nats-e2e")
	create(t, &kollectv1.KollectEventSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bus"}, Spec: kollectv1.KollectEventSinkSpec{
		Type: kollectv1.EventSinkNATS, Mode: kollectv1.EventModeChanges, BufferSize: 1000,
		NATS: &kollectv1.NATSSinkConfig{Servers: []string{srv.URL}, Stream: "KOLLECTE2E", CreateStream: true,
			SubjectTemplate: "kollect.{cluster}.{kind}", KVBucket: "kollect-e2e"},
	}})
	create(t, colorInventory(ns, kollectv1.SinkReferences{Event: []kollectv1.LocalObjectReference{{Name: "bus"}}})...)
	startAgentWith(t, nil, "c-nats", ns, nil)

	ctx := context.Background()
	cm := configMap(ns, "a", map[string]string{"color": "red"})
	create(t, cm)
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	events := func() []export.ChangeEvent {
		stream, err := js.Stream(ctx, "KOLLECTE2E")
		if err != nil {
			return nil
		}
		cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return nil
		}
		var out []export.ChangeEvent
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			return nil
		}
		for m := range batch.Messages() {
			var ev export.ChangeEvent
			if json.Unmarshal(m.Data(), &ev) == nil && ev.Row != nil && ev.Row.Name == "a" {
				out = append(out, ev)
			}
		}
		return out
	}
	types := func() string {
		var ts []string
		for _, e := range events() {
			ts = append(ts, string(e.Type)+":"+strings.TrimSuffix(strings.TrimPrefix(string(e.Row.Attributes), `{"color":"`), `","keys":1}`))
		}
		return strings.Join(ts, ",")
	}
	eventually(t, 30*time.Second, "the upsert", func() (bool, string) { return types() == "upsert:red", types() })
	cm.Data["color"] = "blue"
	if err := cp.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the second upsert", func() (bool, string) { return types() == "upsert:red,upsert:blue", types() })
	if err := cp.Client.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the delete", func() (bool, string) {
		return strings.HasPrefix(types(), "upsert:red,upsert:blue,delete"), types()
	})
	kv, err := js.KeyValue(ctx, "kollect-e2e")
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := kv.Keys(ctx)
	if len(keys) != 0 {
		t.Fatalf("KV bucket still holds %v after the delete", keys)
	}
}

// TestPostgresSharedByTwoClusters runs two real agents on two control planes, each exporting
// to the same PostgreSQL table: both clusters' rows are there, and a delete in one cluster
// removes exactly its row and leaves the other cluster's rows alone.
func TestPostgresSharedByTwoClusters(t *testing.T) {
	t.Parallel()
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	east, err := testenv.Start("east", testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = east.Stop() })

	ctx := context.Background()
	setup := func(c client.Client, cluster string) {
		ns := "pg-e2e"
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		allowUnverifiedSinks(t, c, ns) // the test PostgreSQL is plaintext
		objs := []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}, StringData: map[string]string{"username": "postgres", "password": "unused"}},
			&kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-db"}, Spec: kollectv1.KollectDatabaseSinkSpec{
				Type: kollectv1.DatabaseSinkPostgres, Timeout: metav1.Duration{Duration: 30 * time.Second},
				Postgres: &kollectv1.PostgresSinkConfig{Host: "127.0.0.1", Port: int32(pg.Port), Database: "postgres", Schema: "kollect",
					Table: "rows", SSLMode: "disable", SecretRef: kollectv1.SecretReference{Name: "pg"},
					StatementTimeout: metav1.Duration{Duration: 10 * time.Second}, MaxConnections: 2}}},
		}
		objs = append(objs, colorInventory(ns, kollectv1.SinkReferences{Database: []kollectv1.LocalObjectReference{{Name: "fleet-db"}}})...)
		for i := range 3 {
			objs = append(objs, configMap(ns, fmt.Sprintf("%s-%d", cluster, i), map[string]string{"color": cluster}))
		}
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("%s: %v", o.GetName(), err)
			}
		}
	}
	setup(cp.Client, "west")
	setup(east.Client, "east")
	startAgentWith(t, nil, "west", "pg-e2e", nil)
	startAgentWith(t, east.Config, "east", "pg-e2e", nil)

	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	counts := func() string {
		rows, err := conn.Query(ctx, `SELECT cluster, count(*) FROM kollect.rows GROUP BY cluster ORDER BY cluster`)
		if err != nil {
			return err.Error()
		}
		defer rows.Close()
		var parts []string
		for rows.Next() {
			var c string
			var n int
			_ = rows.Scan(&c, &n)
			parts = append(parts, fmt.Sprintf("%s=%d", c, n))
		}
		return strings.Join(parts, ",")
	}
	eventually(t, 60*time.Second, "rows of both clusters", func() (bool, string) { return counts() == "east=3,west=3", counts() })
	if err := east.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "pg-e2e", Name: "east-1"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the deleted row gone", func() (bool, string) { return counts() == "east=2,west=3", counts() })
	var name string
	if err := conn.QueryRow(ctx, `SELECT string_agg(name, ',' ORDER BY name) FROM kollect.rows WHERE cluster = 'east'`).Scan(&name); err != nil || name != "east-0,east-2" {
		t.Fatalf("east rows after the delete: %q %v", name, err)
	}
}
