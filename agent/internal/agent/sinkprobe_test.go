package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestSinkProbeNowAndPreviewOfItsInventory runs the agent with the real PostgreSQL sink:
//   - a sink whose Secret is missing is Ready=False ProbeFailed, naming the Secret;
//   - once the Secret exists, annotating the sink (kollect.dev/probe-now) probes it at once,
//     where the failing-sink recheck would wait a minute;
//   - status.preview describes the inventory that uses the sink, by its real name, and after
//     the first export says what the table holds for it (not a placeholder's full load).
func TestSinkProbeNowAndPreviewOfItsInventory(t *testing.T) {
	t.Parallel()
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	ns := namespace(t, "probe-now")
	allowUnverifiedSinks(t, cp.Client, ns) // the test PostgreSQL is plaintext
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	create(t, &kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: kollectv1.KollectDatabaseSinkSpec{
		Type: kollectv1.DatabaseSinkPostgres, Timeout: metav1.Duration{Duration: 30 * time.Second},
		Postgres: &kollectv1.PostgresSinkConfig{Host: "127.0.0.1", Port: int32(pg.Port), Database: "postgres", Schema: "kollect",
			Table: "rows", SSLMode: "disable", SecretRef: kollectv1.SecretReference{Name: "pg-creds"},
			StatementTimeout: metav1.Duration{Duration: 10 * time.Second}, MaxConnections: 2}}})
	create(t, colorInventory(ns, kollectv1.SinkReferences{Database: []kollectv1.LocalObjectReference{{Name: "db"}}})...)
	startAgentWith(t, nil, "c-probe", ns, nil)

	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "db"}
	sinkObj := &kollectv1.KollectDatabaseSink{}
	ready := func() (*metav1.Condition, string) {
		if err := cp.Client.Get(ctx, key, sinkObj); err != nil {
			return nil, err.Error()
		}
		c := apimeta.FindStatusCondition(sinkObj.Status.Conditions, kollectv1.ConditionReady)
		if c == nil {
			return nil, "no Ready condition"
		}
		msg := c.Reason + ": " + c.Message
		if p := sinkObj.Status.Preview; p != nil {
			msg += " | preview: " + p.Message
		}
		return c, msg
	}
	eventually(t, 60*time.Second, "ProbeFailed naming the missing Secret", func() (bool, string) {
		c, msg := ready()
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == kollectv1.ReasonProbeFailed && strings.Contains(c.Message, "pg-creds"), msg
	})

	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-creds"},
		StringData: map[string]string{"username": "postgres", "password": "not-shown-anywhere"}})
	if err := cp.Client.Get(ctx, key, sinkObj); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(sinkObj.DeepCopy())
	sinkObj.SetAnnotations(map[string]string{kollectv1.AnnotationProbeNow: time.Now().UTC().Format(time.RFC3339)})
	if err := cp.Client.Patch(ctx, sinkObj, patch); err != nil {
		t.Fatal(err)
	}
	// The failing-sink recheck is a minute away: only the annotation can make this in 30 s.
	eventually(t, 30*time.Second, "Ready=True after kollect.dev/probe-now", func() (bool, string) {
		c, msg := ready()
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kollectv1.ReasonProbeSucceeded, msg
	})

	inventory := ns + "/inv"
	eventually(t, 60*time.Second, "a preview of what the table holds for "+inventory, func() (bool, string) {
		_, msg := ready()
		p := sinkObj.Status.Preview
		return p != nil && strings.Contains(p.Message, "for inventory "+inventory) &&
			strings.Contains(p.Message, "c-probe/"+inventory+" holds 1 rows"), msg
	})
	for _, c := range sinkObj.Status.Conditions {
		if strings.Contains(c.Message, "not-shown-anywhere") {
			t.Fatalf("condition %s shows the password: %s", c.Type, c.Message)
		}
	}
}
