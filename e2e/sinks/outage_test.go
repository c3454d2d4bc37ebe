package sinks

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// Outage timing. The servers stay down for outageLength, longer than the delivery worker's
// first five backoff rounds (full jitter up to 1+2+4+8 s) and one breaker cooldown
// (breakerCooldown, the agent's --sink-breaker-cooldown: the default minute only stretches the
// wait, the catch-up is driven by the 5-second connection test either way), so that the breaker
// opens and the catch-up cannot ride on a short backoff. The cluster churns every churnEvery
// until churnQuiet before the servers return, so that the snapshot they are caught up with is
// the last one (debounce 1 s) and each key owes at most one event.
const (
	breakerCooldown = 15 * time.Second
	outageLength    = 15*time.Second + breakerCooldown + 15*time.Second
	churnEvery      = 5 * time.Second
	churnQuiet      = 12 * time.Second
	catchUpGoal     = 30 * time.Second
	// catchUpWait is how long the test waits after the return to measure a slow catch-up
	// instead of only failing it.
	catchUpWait = 120 * time.Second
)

// TestSinkOutageThroughTheShippedAgent stops PostgreSQL, the Kafka broker and nats-server
// (gracefully, keeping their data and ports: clients get "connection refused") for longer
// than several backoff rounds while the cluster churns, checks that the outage is visible in
// the inventory's and the sinks' status, the agent's metrics and log and the hub's heartbeat,
// restarts them, and measures how long each sink takes to hold the cluster's rows again
// (goal: catchUpGoal, whatever the outage length). Then no row is lost, none duplicated
// (psql: one row per identity; kcat: no byte-identical record twice for a key, and per key
// exactly what events.md promises after an outage; nats CLI: no Nats-Msg-Id or payload twice,
// the same promise, and the KV bucket), rows the churn did not touch were not rewritten, and a
// quiet window holding a resync writes nothing.
func TestSinkOutageThroughTheShippedAgent(t *testing.T) {
	t.Parallel()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	natsCLI, err := testenv.ServerBinary("nats")
	must(t, err)

	var (
		cp    *testenv.ControlPlane
		pg    *testenv.Postgres
		kafka *testenv.Kafka
		nats  *testenv.NATS
		hub   *hubProc
	)
	err = parallel(controlPlane(t, "outage", &cp), postgresServer(t, &pg),
		func() (err error) {
			if kafka, err = testenv.StartKafka(testenv.KafkaOptions{}); err == nil {
				t.Cleanup(kafka.Stop)
			}
			return err
		},
		func() (err error) {
			if nats, err = testenv.StartNATS(testenv.NATSOptions{}); err == nil {
				t.Cleanup(nats.Stop)
			}
			return err
		},
		func() (err error) { hub, err = startHub(t); return err },
	)
	must(t, err)
	pgURL, err := pg.CreateDatabase(ctx, pgDatabase)
	must(t, err)
	sinks := []*sinkUnderTest{postgresSink(pg, pgURL), kafkaSink(kafka), natsSink(nats, natsCLI)}
	servers := map[string]*testenv.Process{"postgres": pg.Process, "kafka": kafka.Process, "nats": nats.Process}
	t.Logf("control plane, hub and 3 sink servers up after %s", time.Since(began).Round(time.Millisecond))

	c := cp.Client
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sinkNS}}))
	must(t, seedWorkloads(ctx, c))
	must(t, applyYAML(ctx, c, kollectConfig))
	for _, s := range sinks {
		must(t, applyYAML(ctx, c, s.manifest))
	}
	ref := func(name string) kollectv1.NamespacedObjectReference {
		return kollectv1.NamespacedObjectReference{Name: name, Namespace: sinkNS}
	}
	must(t, c.Create(ctx, newInventory(kollectv1.ClusterSinkReferences{
		Database: []kollectv1.NamespacedObjectReference{ref("postgres")},
		Event:    []kollectv1.NamespacedObjectReference{ref("kafka"), ref("nats")}})))
	a := newAgent(t, cp)
	a.args, err = hub.agentFlags(ctx, c)
	must(t, err)
	a.args = append(a.args, "--sink-breaker-cooldown="+breakerCooldown.String())
	a.start()

	want, err := expectedRows(ctx, c)
	must(t, err)
	waitRows(t, ctx, sinks, want, "the initial export")
	waitSynced(t, ctx, c, len(sinks), len(want))
	before := readMarks(t, ctx, sinks)
	heard := captureDelivered(t, ctx, kafka, nats, natsCLI)
	errorsBefore := a.bySink(t, "kollect_export_errors_total")
	t.Logf("initial export of %d rows in every sink after %s", len(want), time.Since(began).Round(time.Millisecond))

	// The outage: every server down at once, the cluster churning meanwhile.
	halted := time.Now()
	must(t, parallelEach(servers, func(_ string, p *testenv.Process) error { return p.Halt() }))
	ch := &churn{c: c, touched: map[string]bool{}}
	churned := make(chan error, 1)
	go func() { churned <- ch.run(ctx, halted.Add(outageLength-churnQuiet)) }()
	ev := watchOutage(t, ctx, outageProbe{c: c, agent: a, hub: hub, sinks: sinks, errorsBefore: errorsBefore},
		halted.Add(outageLength))
	must(t, <-churned)
	if rest := outageLength - time.Since(halted); rest > 0 {
		time.Sleep(rest) // the outage's length is the test's parameter, not an observation
	}
	truth, err := expectedRows(ctx, c)
	must(t, err)
	t.Logf("churn during the outage: %s", strings.Join(ch.log, "; "))
	ev.report(t)

	// The return: every server at once, each timed from the moment it accepts connections.
	var mu sync.Mutex
	back := map[string]time.Time{}
	must(t, parallelEach(servers, func(name string, p *testenv.Process) error {
		err := p.Resume()
		mu.Lock()
		back[name] = time.Now()
		mu.Unlock()
		return err
	}))
	outage := map[string]time.Duration{}
	for _, s := range sinks {
		outage[s.name] = back[s.name].Sub(halted)
	}
	converged := waitConverged(t, ctx, sinks, truth, back)
	waitSynced(t, ctx, c, len(sinks), len(truth))
	waitRecovered(t, ctx, c, hub, sinks)

	// Nothing lost, nothing duplicated, nothing else rewritten.
	after := readMarks(t, ctx, sinks)
	lost, dups := map[string]int{}, map[string]int{}
	for _, s := range sinks {
		got, err := s.rows(ctx)
		must(t, err)
		lost[s.name] = lostRows(truth, got)
		if d := diffRows(truth, got); d != "" {
			t.Errorf("%s (%s) does not hold the cluster's rows after the outage:\n  %s", s.name, s.client, d)
		}
		if s.typ != "postgres" {
			continue // the event sinks' per-key check (checkDelivered) knows about resyncs
		}
		var bad []string
		for _, k := range changedUnits(before[s.name], after[s.name]) {
			if !allowedToChange(k, ch.touched) {
				bad = append(bad, fmt.Sprintf("%s: %q -> %q", k, before[s.name][k], after[s.name][k]))
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s (%s): the outage's catch-up rewrote rows the churn did not touch:\n  %s", s.name, s.client, strings.Join(bad, "\n  "))
		}
	}
	dups["postgres"] = pgDuplicates(t, ctx, pgURL, len(truth))
	dk, dn := checkDelivered(t, ctx, heard, want, truth)
	dups["kafka"], dups["nats"] = dk, dn

	// A quiet window holding a resync writes nothing.
	settled := readMarks(t, ctx, sinks)
	exportsBefore := a.exportCalls(t)
	windowStart := time.Now()
	// The window closes on the resync's calls of every sink, once a debounce + resync period
	// has passed, not after a sleep.
	a.waitExportCalls(t, ctx, sinks, exportsBefore, windowStart.Add(staticWindow), "the quiet window's resync calling every sink")
	assertStatic(t, sinks, settled, readMarks(t, ctx, sinks), fmt.Sprintf("over %s of static data after the catch-up",
		time.Since(windowStart).Round(time.Second)), nil)
	checkRows(t, ctx, sinks, truth, "after the quiet window")

	for _, s := range sinks {
		conv := "none"
		if d, ok := converged[s.name]; ok {
			conv = fmt.Sprintf("%.1fs", d.Seconds())
		}
		t.Logf("outage figures: sink=%s outage=%.0fs converge_after_return=%s lost=%d duplicated=%d",
			s.name, outage[s.name].Seconds(), conv, lost[s.name], dups[s.name])
		if d, ok := converged[s.name]; !ok || d > catchUpGoal {
			t.Errorf("%s: caught up %s after the server returned; the goal is %s whatever the outage length", s.name, conv, catchUpGoal)
		}
	}
	t.Logf("outage test done in %s", time.Since(began).Round(time.Millisecond))
}

// waitConverged measures, per sink, the time from its server's return until its read-back
// equals truth; a sink that never gets there within catchUpWait has no entry.
func waitConverged(t *testing.T, ctx context.Context, sinks []*sinkUnderTest, truth rowSet, back map[string]time.Time) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range sinks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := ""
			for time.Since(back[s.name]) < catchUpWait {
				got, err := s.rows(ctx)
				seen := time.Now()
				if err == nil {
					if last = diffRows(truth, got); last == "" {
						mu.Lock()
						out[s.name] = seen.Sub(back[s.name])
						mu.Unlock()
						return
					}
				} else {
					last = err.Error()
				}
				time.Sleep(250 * time.Millisecond)
			}
			t.Errorf("%s (%s) did not hold the cluster's rows within %s of its server's return:\n  %s", s.name, s.client, catchUpWait, last)
		}()
	}
	wg.Wait()
	return out
}

// lostRows counts the changes got lacks: rows of truth it lacks or holds with other content,
// and rows it still holds that the cluster deleted (a lost delete).
func lostRows(truth, got rowSet) int {
	n := 0
	for k, w := range truth {
		if g, ok := got[k]; !ok || g != w {
			n++
		}
	}
	for k := range got {
		if _, ok := truth[k]; !ok {
			n++
		}
	}
	return n
}

// churn modifies, adds and deletes objects during the outage, some of them more than once,
// and remembers which rows it touched ("uid:<uid>", as the write markers name them).
type churn struct {
	c       client.Client
	touched map[string]bool
	log     []string
}

// run performs one step every churnEvery until until.
func (ch *churn) run(ctx context.Context, until time.Time) error {
	steps := ch.steps()
	next := time.Now()
	for i := 0; time.Now().Before(until); i++ {
		if i >= len(steps) {
			return fmt.Errorf("the churn ran out of its %d steps before the outage's end", len(steps))
		}
		if err := steps[i](ctx); err != nil {
			return fmt.Errorf("churn step %d: %w", i, err)
		}
		next = next.Add(churnEvery)
		time.Sleep(time.Until(next))
	}
	return nil
}

// steps is the churn: team-a/web changes five times, team-c/flash and team-c/flash2 are
// added and deleted within the outage, team-b/worker-config changes twice, and there are
// adds and deletes of each kind.
func (ch *churn) steps() []func(context.Context) error {
	replicas := func(n int32) func(*appsv1.Deployment) { return func(d *appsv1.Deployment) { d.Spec.Replicas = &n } }
	mode := func(m string) func(*corev1.ConfigMap) { return func(cm *corev1.ConfigMap) { cm.Data["mode"] = m } }
	return []func(context.Context) error{
		ch.update("team-a", "web", replicas(11)),
		ch.create(configMap("team-b", "extra-1", map[string]string{"mode": "new"})),
		ch.create(configMap("team-c", "flash", map[string]string{"mode": "brief"})),
		ch.update("team-a", "web", replicas(12)),
		ch.delete(&corev1.Service{}, "team-c", "api"),
		ch.updateCM("team-b", "worker-config", mode("red")),
		ch.update("team-a", "web", replicas(13)),
		ch.delete(&corev1.ConfigMap{}, "team-c", "flash"),
		ch.create(service("team-a", "metrics", 9090)),
		ch.update("team-a", "web", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "registry.example/web:9.9" }),
		ch.create(configMap("team-b", "extra-2", map[string]string{"mode": "new", "size": "2"})),
		ch.delete(&appsv1.Deployment{}, "team-b", "api"),
		ch.updateCM("team-b", "worker-config", mode("violet")),
		ch.create(configMap("team-c", "flash2", map[string]string{"mode": "brief"})),
		ch.update("team-c", "worker", replicas(7)),
		ch.delete(&corev1.ConfigMap{}, "team-c", "flash2"),
		ch.update("team-a", "web", replicas(14)),
		ch.delete(&corev1.ConfigMap{}, "team-b", "extra-1"),
		ch.update("team-a", "web", replicas(15)),
	}
}

func (ch *churn) note(what string, obj client.Object) {
	ch.touched["uid:"+string(obj.GetUID())] = true
	ch.log = append(ch.log, what+" "+obj.GetNamespace()+"/"+obj.GetName())
}

func (ch *churn) update(ns, name string, mutate func(*appsv1.Deployment)) func(context.Context) error {
	return func(ctx context.Context) error {
		var d appsv1.Deployment
		if err := ch.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			return err
		}
		mutate(&d)
		ch.note("modify", &d)
		return ch.c.Update(ctx, &d)
	}
}

func (ch *churn) updateCM(ns, name string, mutate func(*corev1.ConfigMap)) func(context.Context) error {
	return func(ctx context.Context) error {
		var cm corev1.ConfigMap
		if err := ch.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
			return err
		}
		mutate(&cm)
		ch.note("modify", &cm)
		return ch.c.Update(ctx, &cm)
	}
}

func (ch *churn) create(obj client.Object) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := ch.c.Create(ctx, obj); err != nil {
			return err
		}
		ch.note("add", obj)
		return nil
	}
}

func (ch *churn) delete(obj client.Object, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := ch.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return err
		}
		ch.note("delete", obj)
		return ch.c.Delete(ctx, obj)
	}
}

// parallel runs fns at once and joins their errors.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn() }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// parallelEach runs fn on every process at once, in a stable order of names.
func parallelEach(ps map[string]*testenv.Process, fn func(string, *testenv.Process) error) error {
	names := make([]string, 0, len(ps))
	for n := range ps {
		names = append(names, n)
	}
	sort.Strings(names)
	fns := make([]func() error, len(names))
	for i, n := range names {
		fns[i] = func() error { return fn(n, ps[n]) }
	}
	return parallel(fns...)
}
