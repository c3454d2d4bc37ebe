package sinks

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// outageProbe is what watchOutage looks at while the servers are down.
type outageProbe struct {
	c            client.Client
	agent        *agentProc
	hub          *hubProc
	sinks        []*sinkUnderTest
	errorsBefore map[string]float64
}

// outageEvidence is, per claim about the outage, when it was first seen to hold (since the
// halt) or, for claims never seen, the last observation.
type outageEvidence struct {
	claims []string
	seen   map[string]time.Duration
	last   map[string]string
}

// watchOutage polls the inventory's and sinks' status, the agent's metrics and log and the
// hub's view of the cluster until every claim was seen to hold or until ends.
func watchOutage(t *testing.T, ctx context.Context, p outageProbe, until time.Time) *outageEvidence {
	t.Helper()
	start := time.Now()
	ev := &outageEvidence{seen: map[string]time.Duration{}, last: map[string]string{}}
	for time.Now().Before(until) {
		obs := p.observe(ctx)
		if ev.claims == nil {
			for _, o := range obs {
				ev.claims = append(ev.claims, o.claim)
			}
		}
		for _, o := range obs {
			if _, done := ev.seen[o.claim]; done {
				continue
			}
			if o.ok {
				ev.seen[o.claim] = time.Since(start)
			} else {
				ev.last[o.claim] = o.saw
			}
		}
		if len(ev.seen) == len(ev.claims) {
			break
		}
		time.Sleep(time.Second)
	}
	return ev
}

// report logs when each claim held and fails for those that never did.
func (ev *outageEvidence) report(t *testing.T) {
	t.Helper()
	for _, c := range ev.claims {
		if d, ok := ev.seen[c]; ok {
			t.Logf("during the outage, %.0fs after the halt: %s", d.Seconds(), c)
		} else {
			t.Errorf("during the outage, never: %s\n  last seen: %s", c, ev.last[c])
		}
	}
}

type observation struct {
	claim string
	ok    bool
	saw   string
}

func (p outageProbe) observe(ctx context.Context) []observation {
	var obs []observation
	add := func(claim string, ok bool, saw string, args ...any) {
		obs = append(obs, observation{claim: claim, ok: ok, saw: fmt.Sprintf(saw, args...)})
	}
	var inv kollectv1.KollectClusterInventory
	invErr := p.c.Get(ctx, client.ObjectKey{Name: inventory}, &inv)
	degraded := meta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionDegraded)
	synced := meta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionSynced)
	add("the inventory is Degraded=True with reason ExportFailed",
		invErr == nil && degraded != nil && degraded.Status == metav1.ConditionTrue && degraded.Reason == kollectv1.ReasonExportFailed,
		"%v %+v", invErr, degraded)
	add("the inventory is not Synced=True", invErr == nil && (synced == nil || synced.Status != metav1.ConditionTrue), "%v %+v", invErr, synced)
	errs, errsErr := p.agent.scrapeBySink("kollect_export_errors_total")
	pending, pendErr := p.agent.scrapeBySink("kollect_event_buffer_pending")
	logText, _ := os.ReadFile(p.agent.log)
	hubSinks, hubErr := p.hub.clusterSinks(ctx, cluster)
	for _, s := range p.sinks {
		st := sinkStatus(inv, s.name)
		add(s.name+": status.sinks[].lastError says connection refused, with an errorClass",
			strings.Contains(st.LastError, "connection refused") && st.ErrorClass != "", "lastError %q errorClass %q", st.LastError, st.ErrorClass)
		add(s.name+": status.sinks[].errorClass is circuitOpen (the breaker opened)", st.ErrorClass == kollectv1.SinkErrorCircuitOpen,
			"errorClass %q", st.ErrorClass)
		add(s.name+": the backlog shows in status (the sink's checksum is not the inventory's)",
			st.Checksum != "" && inv.Status.Checksum != "" && st.Checksum != inv.Status.Checksum, "sink %q inventory %q", st.Checksum, inv.Status.Checksum)
		ready, err := sinkReady(ctx, p.c, s)
		add(s.name+": the sink object is Ready=False", err == nil && ready != nil && ready.Status == metav1.ConditionFalse, "%v %+v", err, ready)
		add(s.name+": kollect_export_errors_total rose", errsErr == nil && errs[s.name] > p.errorsBefore[s.name],
			"%v: %v, before the outage %v", errsErr, errs[s.name], p.errorsBefore[s.name])
		if s.typ != "postgres" {
			add(s.name+": kollect_event_buffer_pending > 0", pendErr == nil && pending[s.name] > 0, "%v: %v", pendErr, pending[s.name])
		}
		line := failureLogLine(string(logText), s.name)
		add(s.name+": the agent logged the export failure at warning or error level, naming the sink and saying connection refused",
			line != "", "%s", nearestLogLine(string(logText), s.name))
		hs := hubSinks[s.name]
		add(s.name+": the hub's heartbeat shows lastError and errorClass", hubErr == nil && hs.LastError != "" && hs.ErrorClass != "",
			"%v %+v", hubErr, hs)
		add(s.name+": the hub's heartbeat shows lastAttemptTime after the last success",
			hubErr == nil && laterThan(hs.LastAttemptTime, hs.LastSuccessTime), "%v %+v", hubErr, hs)
	}
	return obs
}

// laterThan reports whether RFC 3339 timestamp a is set and after b (or b is unset).
func laterThan(a, b string) bool {
	ta, err := time.Parse(time.RFC3339Nano, a)
	if err != nil {
		return false
	}
	tb, err := time.Parse(time.RFC3339Nano, b)
	return err != nil || ta.After(tb)
}

// failureLogLine returns an agent log line (JSON, zap) at warn or error level that names the
// sink and says connection refused, or "".
func failureLogLine(log, sinkName string) string {
	for _, line := range strings.Split(log, "\n") {
		var rec struct{ Level string }
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if (rec.Level == "warn" || rec.Level == "warning" || rec.Level == "error") &&
			strings.Contains(line, sinkNS+"/"+sinkName) && strings.Contains(line, "connection refused") {
			return line
		}
	}
	return ""
}

// nearestLogLine is the last line naming the sink and saying connection refused at any level,
// to show what the agent does log.
func nearestLogLine(log, sinkName string) string {
	out := "(no line names the sink and says connection refused)"
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, sinkNS+"/"+sinkName) && strings.Contains(line, "connection refused") {
			out = line
		}
	}
	return out
}

func sinkStatus(inv kollectv1.KollectClusterInventory, name string) kollectv1.SinkExportStatus {
	for _, s := range inv.Status.Sinks {
		if s.Name == name {
			return s
		}
	}
	return kollectv1.SinkExportStatus{}
}

// sinkReady reads the sink object's Ready condition.
func sinkReady(ctx context.Context, c client.Client, s *sinkUnderTest) (*metav1.Condition, error) {
	key := client.ObjectKey{Namespace: sinkNS, Name: s.name}
	if s.typ == "postgres" {
		var o kollectv1.KollectDatabaseSink
		err := c.Get(ctx, key, &o)
		return meta.FindStatusCondition(o.Status.Conditions, kollectv1.ConditionReady), err
	}
	var o kollectv1.KollectEventSink
	err := c.Get(ctx, key, &o)
	return meta.FindStatusCondition(o.Status.Conditions, kollectv1.ConditionReady), err
}

// waitRecovered waits until the sink objects are Ready=True again, the inventory is no longer
// Degraded, and the hub's heartbeat shows no error for them.
func waitRecovered(t *testing.T, ctx context.Context, c client.Client, hub *hubProc, sinks []*sinkUnderTest) {
	t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < 90*time.Second {
		var problems []string
		var inv kollectv1.KollectClusterInventory
		must(t, c.Get(ctx, client.ObjectKey{Name: inventory}, &inv))
		if d := meta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionDegraded); d != nil && d.Status == metav1.ConditionTrue {
			problems = append(problems, fmt.Sprintf("inventory Degraded=True %s: %s", d.Reason, d.Message))
		}
		hs, err := hub.clusterSinks(ctx, cluster)
		if err != nil {
			problems = append(problems, "hub: "+err.Error())
		}
		for _, s := range sinks {
			r, err := sinkReady(ctx, c, s)
			if err != nil || r == nil || r.Status != metav1.ConditionTrue {
				problems = append(problems, fmt.Sprintf("%s Ready: %v %+v", s.name, err, r))
			}
			if h := hs[s.name]; h.LastError != "" || h.ErrorClass != "" {
				problems = append(problems, fmt.Sprintf("hub: %s still shows %s %q", s.name, h.ErrorClass, h.LastError))
			}
		}
		if len(problems) == 0 {
			t.Logf("after the catch-up: sinks Ready=True, inventory not Degraded, hub heartbeat without errors, %s after convergence",
				time.Since(start).Round(100*time.Millisecond))
			return
		}
		last = strings.Join(problems, "\n  ")
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("90s after the catch-up, the outage still shows:\n  %s", last)
}

// pgDuplicates counts rows beyond one per identity, with psql.
func pgDuplicates(t *testing.T, ctx context.Context, url string, want int) int {
	t.Helper()
	out, err := (&pgReader{url: url}).psql(ctx, `SELECT count(*), count(DISTINCT (cluster, inventory, target, uid)) FROM kollect.rows`)
	must(t, err)
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("psql count: %q", out)
	}
	total, _ := strconv.Atoi(f[0])
	distinct, _ := strconv.Atoi(f[1])
	if total != distinct || total != want {
		t.Errorf("postgres: %d rows for %d identities, want %d of each", total, distinct, want)
	}
	return total - distinct
}

// delivered remembers what the event brokers held before the outage, to tell the records
// and messages the outage's catch-up produced.
type delivered struct {
	kafka    *kafkaReader
	nats     *natsReader
	kafkaPre map[string]bool // partition/offset
	natsPre  uint64          // last stream sequence
	// natsCreated is the stream's creation time: the same after the outage, or the stream
	// was deleted and created again (and its sequences restarted).
	natsCreated string
}

func captureDelivered(t *testing.T, ctx context.Context, k *testenv.Kafka, n *testenv.NATS, natsCLI string) *delivered {
	t.Helper()
	d := &delivered{kafka: &kafkaReader{addr: k.Addr}, nats: &natsReader{cli: natsCLI, url: n.URL, cache: map[string]map[uint64]natsMsg{}},
		kafkaPre: map[string]bool{}}
	recs, err := d.kafka.records(ctx)
	must(t, err)
	for _, r := range recs {
		d.kafkaPre[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = true
	}
	_, d.natsPre, d.natsCreated, err = d.nats.streamState(ctx, natsStream)
	must(t, err)
	return d
}

// message is one record or stream message for a key, in broker order.
type message struct {
	pos    string
	value  []byte // nil for a Kafka tombstone
	id     string // Nats-Msg-Id
	resync bool   // the resync mark (kollect-resync / Kollect-Resync: true)
	fresh  bool   // produced after the outage began
	event  changeEvent
}

// checkDelivered checks both brokers' history against events.md: no message twice (the same
// bytes, or the same Nats-Msg-Id, for one key), per key no message older than one before it (a
// record of an abandoned attempt lingering), and after the outage per key exactly what the
// outage changed, once, in its latest state. It returns the duplicates per broker.
func checkDelivered(t *testing.T, ctx context.Context, d *delivered, pre, truth rowSet) (kafkaDups, natsDups int) {
	t.Helper()
	recs, err := d.kafka.records(ctx)
	must(t, err)
	byKey := map[string][]message{}
	for _, r := range recs {
		if r.header("kollect-event") == "state" {
			continue // the inventory's state record (kafka.md): no row's history
		}
		pos := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
		m := message{pos: pos, fresh: !d.kafkaPre[pos]}
		for i := 0; i+1 < len(r.Headers); i += 2 {
			if r.Headers[i] == "kollect-resync" && r.Headers[i+1] == "true" {
				m.resync = true
			}
		}
		if r.Payload != nil {
			m.value = []byte(*r.Payload)
		}
		byKey[*r.Key] = append(byKey[*r.Key], m)
	}
	kafkaDups = checkKeys(t, "kafka (kcat)", byKey, pre, truth, true)

	d.nats.mu.Lock()
	msgs, err := d.nats.messages(ctx, natsStream)
	d.nats.mu.Unlock()
	must(t, err)
	if created := d.nats.created[natsStream]; created != d.natsCreated {
		t.Errorf("nats (nats CLI): stream %s was created at %s before the outage and at %s after it: its history is gone",
			natsStream, d.natsCreated, created)
		d.natsPre = 0
	}
	byKey = map[string][]message{}
	ids := map[string]string{}
	for _, nm := range msgs {
		if strings.Contains(nm.Header, "Kollect-Event: state") {
			continue // the inventory's state message (nats.md): no row's history
		}
		m := message{pos: fmt.Sprint(nm.Seq), value: nm.Data, id: header(nm.Header, "Nats-Msg-Id"), fresh: nm.Seq > d.natsPre,
			resync: header(nm.Header, "Kollect-Resync") == "true"}
		if prev, dup := ids[m.id]; dup || m.id == "" {
			t.Errorf("nats (nats CLI): stream message %d has Nats-Msg-Id %q, as message %s has", nm.Seq, m.id, prev)
			natsDups++
		}
		ids[m.id] = m.pos
		key := header(nm.Header, "Kollect-Key")
		byKey[key] = append(byKey[key], m)
	}
	natsDups += checkKeys(t, "nats (nats CLI)", byKey, pre, truth, false)
	return kafkaDups, natsDups
}

// checkKeys applies the per-key checks of checkDelivered to one broker's messages.
func checkKeys(t *testing.T, broker string, byKey map[string][]message, pre, truth rowSet, tombstones bool) (dups int) {
	t.Helper()
	prefix := cluster + "/" + inventory + "/"
	keys := map[string]bool{}
	for k := range byKey {
		keys[k] = true
	}
	for k := range pre {
		keys[prefix+k] = true
	}
	for k := range truth {
		keys[prefix+k] = true
	}
	for key := range keys {
		rk := strings.TrimPrefix(key, prefix)
		seen := map[string]string{}
		var newest time.Time
		var got []string
		for _, m := range byKey[key] {
			if m.value != nil {
				if at, dup := seen[string(m.value)]; dup {
					t.Errorf("%s: key %s: message %s has the same bytes as message %s: delivered twice", broker, key, m.pos, at)
					dups++
				}
				seen[string(m.value)] = m.pos
				if err := json.Unmarshal(m.value, &m.event); err != nil {
					t.Errorf("%s: key %s: message %s: %v", broker, key, m.pos, err)
					continue
				}
				var obs struct{ ObservedAt time.Time }
				_ = json.Unmarshal(m.value, &obs)
				if obs.ObservedAt.Before(newest) {
					t.Errorf("%s: key %s: message %s observed at %s comes after one observed at %s: a record of an earlier attempt lingered",
						broker, key, m.pos, obs.ObservedAt, newest)
				}
				newest = obs.ObservedAt
			}
			if !m.fresh {
				continue
			}
			switch {
			case m.value == nil:
				got = append(got, "tombstone")
			case m.event.Type == "upsert" && m.event.Row != nil:
				r, err := m.event.Row.row()
				w, ok := truth[rk]
				switch {
				case err != nil || !ok || r != w:
					got = append(got, "upsert of "+r.Attributes+" (not the latest state)")
				case m.resync && pre[rk] == w:
					got = append(got, "resync")
				default:
					got = append(got, "upsert")
				}
			default:
				got = append(got, m.event.Type)
			}
		}
		want := owedAfterOutage(pre, truth, rk, tombstones)
		_, wasThere := pre[rk]
		_, isThere := truth[rk]
		switch {
		case tombstones && len(got) > 1 && strings.HasSuffix(got[0], "(not the latest state)") &&
			strings.Join(got[1:], ",") == strings.Join(want, ","):
			// events.md, "Latest state": on Kafka an event already handed to the client when
			// the brokers went away is delivered when they return, just before the newer
			// state (kafka.md: franz-go cannot withdraw it). At most one, and first.
			want = got
		case !wasThere && !isThere && len(got) > 0 && got[0] == "delete":
			// Added and deleted during the outage: nothing, or (events.md, "Outages", 2) the
			// current state of a key a failed attempt may have delivered, a delete.
			want = owedAfterOutage(rowSet{rk: row{}}, truth, rk, tombstones)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: key %s (%s): after the outage it got [%s], want [%s] (events.md: the latest state of every changed row, once)",
				broker, key, describeKey(pre, truth, rk), strings.Join(got, ", "), strings.Join(want, ", "))
		}
	}
	return dups
}

// owedAfterOutage is what events.md promises a consumer for a row after an outage: its latest
// state once if it changed or appeared, its delete (and on Kafka a tombstone) if it went, and
// nothing if it is as before (untouched, or added and deleted while the broker was down): a
// periodic resync while events are owed sends what is owed, no marked re-send (events.md).
func owedAfterOutage(pre, truth rowSet, rk string, tombstones bool) []string {
	p, wasThere := pre[rk]
	n, isThere := truth[rk]
	switch {
	case isThere && (!wasThere || p != n):
		return []string{"upsert"}
	case wasThere && !isThere && tombstones:
		return []string{"delete", "tombstone"}
	case wasThere && !isThere:
		return []string{"delete"}
	}
	return nil
}

func describeKey(pre, truth rowSet, rk string) string {
	r, ok := truth[rk]
	if !ok {
		r = pre[rk]
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// header returns the value of a header in a NATS message's raw header block.
func header(raw, name string) string {
	for _, line := range strings.Split(raw, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
