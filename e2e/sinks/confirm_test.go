package sinks

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// confirmEvery is the inventory's confirmInterval here: the API's minimum.
const confirmEvery = 10 * time.Second

// TestQuietClusterIsConfirmed: the shipped kollect-agent, its data unchanged, keeps telling a
// PostgreSQL sink (read with psql) and the hub (read over its JSON API) that the sink is
// current: confirmed_at keeps moving (confirmation after confirmation) and the hub's freshness
// lag stays within a confirm interval while exported_at, the last change, grows old, and no
// row is rewritten. The documented alerts (docs/operations.md, docs/hub.md, the agent chart's
// PrometheusRule) stay quiet in a real Prometheus that scrapes both, and fire once PostgreSQL
// stops.
func TestQuietClusterIsConfirmed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var (
		cp  *testenv.ControlPlane
		pg  *testenv.Postgres
		hub *hubProc
	)
	must(t, parallel(controlPlane(t, "confirm", &cp), postgresServer(t, &pg),
		func() (err error) { hub, err = startHub(t); return err },
	))
	pgURL, err := pg.CreateDatabase(ctx, pgDatabase)
	must(t, err)
	c := cp.Client
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sinkNS}}))
	must(t, seedWorkloads(ctx, c))
	must(t, applyYAML(ctx, c, kollectConfig))
	pgs := postgresSink(pg, pgURL)
	must(t, applyYAML(ctx, c, pgs.manifest))
	inv := newInventory(kollectv1.ClusterSinkReferences{Database: []kollectv1.NamespacedObjectReference{{Name: "postgres", Namespace: sinkNS}}})
	inv.Spec.ConfirmInterval = &metav1.Duration{Duration: confirmEvery}
	inv.Spec.ResyncInterval = nil
	must(t, c.Create(ctx, inv))
	a := newAgent(t, cp)
	a.args, err = hub.agentFlags(ctx, c)
	must(t, err)
	a.start()
	docs := documentedAlerts(t)
	prom := startAlertPrometheus(t, a, hub, docs)

	want, err := expectedRows(ctx, c)
	must(t, err)
	waitRows(t, ctx, []*sinkUnderTest{pgs}, want, "the initial export")
	db := &pgReader{url: pgURL}
	state := func() (exported, confirmed time.Time, err error) {
		out, err := db.psql(ctx, `SELECT extract(epoch FROM exported_at), extract(epoch FROM confirmed_at) FROM kollect.rows_state`)
		if err != nil {
			return exported, confirmed, err
		}
		var e, c float64
		if _, err := fmt.Sscanf(strings.TrimSpace(out), "%f\t%f", &e, &c); err != nil {
			return exported, confirmed, fmt.Errorf("state row %q: %w", out, err)
		}
		return time.UnixMilli(int64(e * 1000)), time.UnixMilli(int64(c * 1000)), nil
	}
	rowMarks := func() string {
		out, err := db.psql(ctx, `SELECT string_agg(uid || '@' || xmin::text, ',' ORDER BY uid) FROM kollect.rows`)
		must(t, err)
		return out
	}
	exported, _, err := state()
	must(t, err)
	rowsBefore := rowMarks()

	// Provenance: the state names the shipped agent's version and its instance: the agent's
	// namespace (--pod-namespace, as the hub flags give it) at the UID of the cluster's
	// kube-system namespace.
	v, err := testenv.Version()
	must(t, err)
	kubeSystem := &corev1.Namespace{}
	must(t, c.Get(ctx, client.ObjectKey{Name: "kube-system"}, kubeSystem))
	writer, err := db.psql(ctx, `SELECT agent_version || ' ' || agent_instance FROM kollect.rows_state`)
	must(t, err)
	if got, want := strings.TrimSpace(writer), v+" kollect-system@"+string(kubeSystem.UID); got != want {
		t.Fatalf("the state names the writer %q, want %q: version, the agent's namespace and kube-system's UID", got, want)
	}

	// Quiet: the agent confirms and exports nothing. The window closes on the positive
	// control, a second confirmation after the export (each one later than the one before):
	// the worker that would have exported has run twice by then. exported_at must not move
	// meanwhile; how far apart the confirmations came is a figure, logged.
	var confirmed time.Time
	var seen []time.Time
	for deadline := time.Now().Add(5*confirmEvery + 30*time.Second); len(seen) < 2; time.Sleep(time.Second) {
		e, c, err := state()
		must(t, err)
		if !e.Equal(exported) {
			t.Fatalf("exported_at moved from %s to %s without a change", exported, e)
		}
		if c.After(exported) && (len(seen) == 0 || c.After(seen[len(seen)-1])) {
			seen = append(seen, c)
		}
		confirmed = c
		if time.Now().After(deadline) {
			t.Fatalf("confirmed_at %s: %d confirmation(s) seen in %s of quiet since the export at %s, want 2: not kept current",
				confirmed.Format(time.RFC3339), len(seen), time.Since(exported).Round(time.Second), exported.Format(time.RFC3339))
		}
	}
	if !confirmed.After(exported.Add(confirmEvery)) {
		t.Fatalf("the second confirmation, at %s, came less than an interval (%s) after the export at %s",
			confirmed.Format(time.RFC3339Nano), confirmEvery, exported.Format(time.RFC3339Nano))
	}
	t.Logf("MEASURED: confirmations %s and %s after the export (interval %s)",
		seen[0].Sub(exported).Round(100*time.Millisecond), seen[1].Sub(exported).Round(100*time.Millisecond), confirmEvery)
	if after := rowMarks(); after != rowsBefore {
		t.Fatalf("confirmations rewrote rows: %s -> %s", rowsBefore, after)
	}

	// The hub judges freshness by the confirmation: lag within an interval (plus a heartbeat),
	// though the last change is older.
	var health struct {
		ExportFreshness []struct {
			Cluster, SinkName, LastSuccessTime, LastConfirmTime, Lag string
		}
	}
	var cell string
	hubFresh := func() bool {
		must(t, hub.call(ctx, "GetFleetHealth", map[string]any{}, &health))
		for _, f := range health.ExportFreshness {
			if f.SinkName != "postgres" {
				continue
			}
			cell = fmt.Sprintf("%+v", f)
			lag, err := time.ParseDuration(f.Lag)
			changed, perr := time.Parse(time.RFC3339Nano, f.LastSuccessTime)
			if err == nil && perr == nil && f.LastConfirmTime != "" && lag < confirmEvery+heartbeatSlack && time.Since(changed) > 2*confirmEvery {
				t.Logf("hub freshness of a quiet sink: lag %s, last change %s ago", lag, time.Since(changed).Round(time.Second))
				return true
			}
		}
		return false
	}
	for end := time.Now().Add(30 * time.Second); !hubFresh(); time.Sleep(time.Second) {
		if time.Now().After(end) {
			t.Fatalf("the hub's freshness of the quiet sink does not follow its confirmations: %s", cell)
		}
	}

	// The documented alerts, evaluated by a real Prometheus scraping this agent and hub: quiet
	// for longer than their threshold, none fires; once the sink is down, they do.
	quietFrom := time.Now()
	for time.Since(exported) < staleAfter+confirmEvery || time.Since(quietFrom) < 5*time.Second {
		time.Sleep(time.Second)
	}
	assertAlertsQuiet(t, ctx, prom, docs, quietFrom)
	if t.Failed() {
		return
	}
	must(t, pg.Halt())
	waitAlertsFiring(t, ctx, prom, staleAfter+confirmEvery+heartbeatSlack+10*time.Second, "KollectExportStale", docs[0].name, docs[2].name)
}

// heartbeatSlack is how late the hub may learn of a confirmation: startHub has agents
// heartbeat every second, and the status patch that carries it comes first.
const heartbeatSlack = 5 * time.Second
