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

// TestScopeDestinationsNarrowSinks: a KollectClusterScope's allowedDestinations keep a
// PostgreSQL sink on 127.0.0.1 from connecting (the inventory names the rule and the table is
// never created), widening the list lets the rows in, and the namespace's own KollectScope,
// listing only another host, narrows the ceiling again: refused although the cluster scope
// allows the address.
func TestScopeDestinationsNarrowSinks(t *testing.T) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	ctx := context.Background()
	ns := "dest-scope"
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kollect.dev/destinations": "narrow"}}})
	everything := kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{{Group: "*", Kind: "*"}},
		AllowedNamespaces: []string{"*"}, AllowedSinks: []kollectv1.SinkRule{{Family: "*"}}}
	ceiling := &kollectv1.KollectClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "dest-ceiling"}, Spec: kollectv1.KollectClusterScopeSpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kollect.dev/destinations": "narrow"}},
		KollectScopeSpec:  everything}}
	ceiling.Spec.AllowedDestinations = &kollectv1.DestinationRules{CIDRs: []string{"10.0.0.0/8"}}
	ceiling.Spec.AllowInsecureSkipVerify = true // postgresSink: the test PostgreSQL is plaintext
	create(t, ceiling)
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), ceiling) })
	create(t, postgresSink(ns, "db", "dest", pg.Port)...)
	create(t, colorInventory(ns, kollectv1.SinkReferences{Database: []kollectv1.LocalObjectReference{{Name: "db"}}})...)
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	startAgentWith(t, nil, "c-dest", ns, nil)

	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
	refusedBy := func(rule string) {
		t.Helper()
		eventually(t, 60*time.Second, "the inventory names "+rule, func() (bool, string) {
			_ = cp.Client.Get(ctx, client.ObjectKeyFromObject(inv), inv)
			raw := fmt.Sprintf("%+v", inv.Status)
			return strings.Contains(raw, "egress refused") && strings.Contains(raw, rule), raw
		})
	}
	refusedBy("KollectClusterScope dest-ceiling allows sinks to reach only addresses in 10.0.0.0/8")
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var table *string
	if err := conn.QueryRow(ctx, `SELECT to_regclass('dest.rows')::text`).Scan(&table); err != nil || table != nil {
		t.Fatalf("the refused sink reached the server: table %v (%v)", table, err)
	}

	// The platform widens its list: the rows land.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cp.Client.Get(ctx, client.ObjectKeyFromObject(ceiling), ceiling))
	ceiling.Spec.AllowedDestinations.CIDRs = []string{"10.0.0.0/8", "127.0.0.0/8"}
	must(cp.Client.Update(ctx, ceiling))
	eventually(t, 60*time.Second, "rows in PostgreSQL", func() (bool, string) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM dest.rows WHERE cluster = 'c-dest'`).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n == 1, fmt.Sprint(n)
	})

	// The namespace's own scope may only narrow: another host only, and the sink is refused.
	own := &kollectv1.KollectScope{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "limits"}, Spec: everything}
	own.Spec.AllowedDestinations = &kollectv1.DestinationRules{Hosts: []string{"db.corp.example"}}
	create(t, own)
	refusedBy("KollectScope dest-scope/limits allows sinks to reach only hosts db.corp.example")
}
