package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// allowUnverifiedSinks creates, through c, a KollectClusterScope that lets the sinks of
// namespace ns, and no other, connect without verifying their server: the test PostgreSQL
// serves no TLS, and sslMode disable needs allowInsecureSkipVerify. It allows every kind,
// namespace and sink, so the namespace is otherwise as free as without a scope.
func allowUnverifiedSinks(t *testing.T, c client.Client, ns string) {
	t.Helper()
	grant := &kollectv1.KollectClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "unverified-" + ns}, Spec: kollectv1.KollectClusterScopeSpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		KollectScopeSpec: kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{{Group: "*", Kind: "*"}},
			AllowedNamespaces: []string{"*"}, AllowedSinks: []kollectv1.SinkRule{{Family: "*"}}},
		AllowInsecureSkipVerify: true}}
	if err := c.Create(context.Background(), grant); err != nil {
		t.Fatalf("creating KollectClusterScope %s: %v", grant.Name, err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), grant) })
}

// TestPlaintextPostgresNeedsAClusterScope: a postgres sink with sslMode disable would send
// its password and rows to whoever answers, so it is refused, by name of the setting and the
// rule, and writes nothing until a KollectClusterScope selecting its namespace allows
// unverified connections.
func TestPlaintextPostgresNeedsAClusterScope(t *testing.T) {
	t.Parallel()
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	ctx := context.Background()
	ns := namespace(t, "plaintext-pg")
	sinkObjs := postgresSink(ns, "db", "plain", pg.Port)
	db := sinkObjs[1].(*kollectv1.KollectDatabaseSink)
	create(t, sinkObjs...)
	create(t, colorInventory(ns, kollectv1.SinkReferences{Database: []kollectv1.LocalObjectReference{{Name: "db"}}})...)
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	startAgentWith(t, nil, "c-plain", ns, nil)

	scopeCondition(t, db, func() []metav1.Condition { return db.Status.Conditions }, kollectv1.ConditionReady, metav1.ConditionFalse,
		kollectv1.ReasonScopeCredentialsDenied, "spec.postgres.sslMode disable: the sink would send its credentials and rows in plaintext, "+
			"to a server it does not verify, and no KollectClusterScope with allowInsecureSkipVerify selects the namespace")
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var table *string
	if err := conn.QueryRow(ctx, `SELECT to_regclass('plain.rows')::text`).Scan(&table); err != nil || table != nil {
		t.Fatalf("the refused sink reached the server: table %v (%v)", table, err)
	}

	allowUnverifiedSinks(t, cp.Client, ns)
	eventually(t, 60*time.Second, "rows in PostgreSQL once granted", func() (bool, string) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM plain.rows WHERE cluster = 'c-plain'`).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n == 1, fmt.Sprint(n)
	})
	eventually(t, 30*time.Second, "the sink Ready once granted", func() (bool, string) {
		_ = cp.Client.Get(ctx, client.ObjectKeyFromObject(db), db)
		c := apimeta.FindStatusCondition(db.Status.Conditions, kollectv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", db.Status.Conditions)
	})
}
