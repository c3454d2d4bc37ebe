package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "shop"}}, Data: data}
}

// configMapInventory declares a profile, a target and an inventory with one (recorded) sink.
func configMapInventory(ns string, debounce, maxDelay time.Duration) []client.Object {
	return []client.Object{
		&kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Spec: kollectv1.KollectProfileSpec{
			Target: kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []kollectv1.Attribute{
				{Name: "color", JSONPath: "{.data.color}", Optional: true},
				{Name: "keys", CEL: "has(object.data) ? size(object.data) : 0", Type: kollectv1.AttributeInt},
			},
		}},
		&kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Spec: kollectv1.KollectTargetSpec{
			ProfileRef:      kollectv1.LocalObjectReference{Name: "cm"},
			TargetSelection: kollectv1.TargetSelection{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"}}},
		}},
		&kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rec"}, Spec: kollectv1.KollectSnapshotSinkSpec{
			Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: "file:///unused"},
		}},
		&kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}, Spec: kollectv1.KollectInventorySpec{
			Targets:      []kollectv1.LocalObjectReference{{Name: "cm"}},
			Sinks:        kollectv1.SinkReferences{Snapshot: []kollectv1.LocalObjectReference{{Name: "rec"}}},
			ExportTiming: kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: debounce}, MaxDelay: metav1.Duration{Duration: maxDelay}},
		}},
	}
}

func rowNames(rows []export.Row) string {
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
	}
	return strings.Join(names, ",")
}

func TestRowsExportedAndOnlyChangedRowsDiffer(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "rows")
	create(t, configMap(ns, "a", map[string]string{"color": "red"}), configMap(ns, "b", map[string]string{"color": "blue", "x": "1"}),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unlabelled"}})
	create(t, configMapInventory(ns, 300*time.Millisecond, 2*time.Second)...)
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)
	rec := recs.get(ns + "/rec")

	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 }) {
		t.Fatal("no export")
	}
	first := rec.Last()
	if got := rowNames(first.Envelope.Rows); got != "a,b" {
		t.Fatalf("exported rows %q, want a,b (the unlabelled one is not selected)", got)
	}
	r := first.Envelope.Rows[1]
	if r.Cluster != "c1" || r.Inventory != ns+"/inv" || r.Target != ns+"/cm" || r.Kind != "ConfigMap" || r.UID == "" {
		t.Fatalf("row identity: %+v", r)
	}
	if string(r.Attributes) != `{"color":"blue","keys":2}` {
		t.Fatalf("attributes %s", r.Attributes)
	}
	if !first.Diff.Full {
		t.Fatal("first export must be a full diff")
	}

	// Change one object: the next export's diff holds exactly that row.
	cm := &corev1.ConfigMap{}
	_ = cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "a"}, cm)
	cm.Data["color"] = "green"
	if err := cp.Client.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	if !rec.WaitFor(10*time.Second, func(b []*sink.Batch) bool { return len(b) >= 2 }) {
		t.Fatal("change not exported")
	}
	d := rec.Last().Diff
	if d.Full || len(d.Added) != 0 || len(d.Deleted) != 0 || rowNames(d.Changed) != "a" {
		t.Fatalf("diff after changing a: full=%v added=%q changed=%q deleted=%q", d.Full, rowNames(d.Added), rowNames(d.Changed), rowNames(d.Deleted))
	}
	if rec.Last().PreviousChecksum != first.Envelope.Checksum {
		t.Fatal("previous checksum not carried")
	}

	// Status shows the export, and nothing more is written while data is static.
	eventually(t, 10*time.Second, "inventory status synced", func() (bool, string) {
		inv := &kollectv1.KollectInventory{}
		_ = cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "inv"}, inv)
		c := apimeta.FindStatusCondition(inv.Status.Conditions, kollectv1.ConditionSynced)
		ok := c != nil && c.Status == metav1.ConditionTrue && inv.Status.ItemCount == 2 && len(inv.Status.Sinks) == 1 &&
			inv.Status.Sinks[0].Checksum == inv.Status.Checksum && inv.Status.Sinks[0].LastExportTime != nil
		return ok, fmt.Sprintf("%+v", inv.Status)
	})
	// The window opens at the synced status and closes when the sink has been called for a
	// resync asked after it: an export caused by the change, the status write or anything
	// else signalled meanwhile has been made by then.
	n := assertRecorderQuiet(t, rec, client.ObjectKey{Namespace: ns, Name: "inv"}, len(rec.Batches()), rec.Last().Envelope.Checksum,
		"static data")
	// Delete: the row goes away in one export.
	if err := cp.Client.Delete(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	if !rec.WaitFor(10*time.Second, func(b []*sink.Batch) bool { return len(b) > n }) {
		t.Fatal("delete not exported")
	}
	if d := rec.Last().Diff; rowNames(d.Deleted) != "a" || len(d.Added)+len(d.Changed) != 0 {
		t.Fatalf("diff after delete: %+v", d)
	}
	// The delete also closes a second window, the one after the resync: its export is alone and
	// no resync. A resync that the resync's own status write brought about (a feedback loop)
	// would precede it or, folded into it, mark it a resync.
	if since := rec.Batches()[n:]; len(since) != 1 || since[0].Resync {
		t.Fatalf("after the requested resync, want the delete's export alone: %s", describeBatches(since))
	}
}

func TestDebounceCoalescesBurstAndMaxDelayBoundsChurn(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "debounce")
	create(t, configMapInventory(ns, time.Second, 3*time.Second)...)
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)
	rec := recs.get(ns + "/rec")
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 }) {
		t.Fatal("no initial export")
	}
	base := len(rec.Batches())

	// A burst of 30 creates within well under the debounce becomes one export. What the
	// debounce promises depends on how fast the burst was made: an export may follow any gap of
	// a debounce between two creates, and one every maxDelay. The burst's pace is measured, so
	// a slow machine weakens the bound instead of failing the test; on a fast one it is one.
	const debounce, maxDelay = time.Second, 3 * time.Second
	began := time.Now()
	prev, gaps := began, 0
	for i := range 30 {
		create(t, configMap(ns, fmt.Sprintf("burst-%02d", i), map[string]string{"i": fmt.Sprint(i)}))
		now := time.Now()
		if now.Sub(prev) >= debounce*8/10 { // the agent sees the events with some latency
			gaps++
		}
		prev = now
	}
	span := time.Since(began)
	allowed := 1 + gaps + int(span/maxDelay)
	if !rec.WaitFor(10*time.Second, func(b []*sink.Batch) bool { return len(b) > base && len(b[len(b)-1].Envelope.Rows) == 30 }) {
		t.Fatalf("burst not exported; last has %d rows", len(rec.Last().Envelope.Rows))
	}
	// The burst's export has been counted once the sink has been called for a resync asked
	// after it: nothing of the burst is left in the debounce loop then.
	after := assertRecorderQuiet(t, rec, client.ObjectKey{Namespace: ns, Name: "inv"}, len(rec.Batches()), rec.Last().Envelope.Checksum, "after the burst")
	if got := len(contentExports(rec.Batches()[base:after])); got < 1 || got > allowed {
		t.Fatalf("burst of 30 changes in %s (%d gaps of %s or more) produced %d exports, want 1..%d: %s",
			span.Round(time.Millisecond), gaps, debounce*8/10, got, allowed, describeBatches(rec.Batches()[base:after]))
	} else {
		t.Logf("burst of 30 changes in %s: %d export(s), at most %d allowed", span.Round(time.Millisecond), got, allowed)
	}

	// Constant churn faster than the debounce: maxDelay still exports. An export during the
	// churn follows either a gap of a debounce between two changes or maxDelay; gaps are
	// measured as in the burst, and the churn goes on until it has brought two exports more
	// than it had gaps, so the debounce alone cannot account for them. How long that takes is
	// a figure, logged; the deadline only bounds a hang.
	base = len(rec.Batches())
	began = time.Now()
	prev, gaps = began, 0
	exports := func() int { return len(rec.Batches()) - base }
	for i := 0; exports() < gaps+2; i++ {
		if time.Since(began) > 2*time.Minute {
			t.Fatalf("2 min of churn with maxDelay %s (changes %s apart, %d gaps of %s or more) produced %d exports, want %d: "+
				"maxDelay does not bound the churn", maxDelay, 300*time.Millisecond, gaps, debounce*8/10, exports(), gaps+2)
		}
		cm := configMap(ns, "churn", map[string]string{"color": fmt.Sprint(i)}) // an extracted attribute
		if i == 0 {
			create(t, cm)
		} else if err := cp.Client.Update(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if i > 0 && now.Sub(prev) >= debounce*8/10 {
			gaps++
		}
		prev = now
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("MEASURED: churn of changes 300 ms apart with debounce %s, maxDelay %s: %d exports (%d gaps of %s or more) in %s",
		debounce, maxDelay, exports(), gaps, debounce*8/10, time.Since(began).Round(time.Millisecond))
}

func TestRestartWithUnchangedDataExportsNothing(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "restart")
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	create(t, configMapInventory(ns, 200*time.Millisecond, time.Second)...)
	recs := &recorders{}
	stop := startAgent(t, nil, "c1", ns, recs)
	rec := recs.get(ns + "/rec")
	eventually(t, 30*time.Second, "status with the exported checksum", func() (bool, string) {
		inv := &kollectv1.KollectInventory{}
		_ = cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "inv"}, inv)
		return len(inv.Status.Sinks) == 1 && inv.Status.Sinks[0].Checksum != "" && inv.Status.Sinks[0].Checksum == inv.Status.Checksum,
			fmt.Sprintf("%+v", inv.Status.Sinks)
	})
	stop()
	n := len(rec.Batches())

	startAgent(t, nil, "c1", ns, recs)
	// The window closes when the restarted agent has called the sink for a resync asked after
	// its start: its first build, which a restart bug would export, was made by then. The
	// resync's previous checksum is what the restarted agent believed the sink held.
	n = assertRecorderQuiet(t, rec, client.ObjectKey{Namespace: ns, Name: "inv"}, n, rec.Last().Envelope.Checksum,
		"restarted agent with unchanged data")
	// The restarted agent's first call is a full diff (it does not know the old content) that
	// still names the checksum in status as the sink's.
	if first := rec.Last(); !first.Diff.Full || first.PreviousChecksum != first.Envelope.Checksum {
		t.Fatalf("after restart: full=%v previous=%q, want a full diff from %q", first.Diff.Full, first.PreviousChecksum, first.Envelope.Checksum)
	}
	// A change after the restart is exported, relative to what that call sent.
	create(t, configMap(ns, "b", map[string]string{"color": "blue"}))
	if !rec.WaitFor(15*time.Second, func(b []*sink.Batch) bool { return len(b) > n }) {
		t.Fatal("change after restart not exported")
	}
	if last := rec.Last(); last.Diff.Full || rowNames(last.Diff.Added) != "b" || last.PreviousChecksum != rec.Batches()[n-1].Envelope.Checksum {
		t.Fatalf("after restart: full=%v added=%q previous=%q", last.Diff.Full, rowNames(last.Diff.Added), last.PreviousChecksum)
	}
	if since := rec.Batches()[n:]; len(since) != 1 || since[0].Resync {
		t.Fatalf("after the requested resync, want the change's export alone: %s", describeBatches(since))
	}
}

func TestBadCELSetsProfileConditionWithCompilerMessage(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "badcel")
	create(t, &kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: kollectv1.KollectProfileSpec{
		Target:     kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Attributes: []kollectv1.Attribute{{Name: "x", CEL: "object.data.size() >"}},
	}})
	startAgent(t, nil, "c1", ns, &recorders{})
	eventually(t, 20*time.Second, "Ready=False CompileFailed", func() (bool, string) {
		p := &kollectv1.KollectProfile{}
		_ = cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "bad"}, p)
		c := apimeta.FindStatusCondition(p.Status.Conditions, kollectv1.ConditionReady)
		if c == nil {
			return false, "no condition"
		}
		return c.Status == metav1.ConditionFalse && c.Reason == "CompileFailed" &&
			strings.Contains(c.Message, "attribute x: CEL:") && strings.Contains(c.Message, "Syntax error"), c.Message
	})
}

func decodeAttrs(t *testing.T, r export.Row) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Attributes, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFirstSnapshotDoesNotWaitForTheDebounce: the debounce spaces exports; the first one is
// built when the watch syncs, even with a debounce of ten minutes.
func TestFirstSnapshotDoesNotWaitForTheDebounce(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "firstsync")
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	create(t, configMapInventory(ns, 10*time.Minute, 10*time.Minute)...)
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)
	rec := recs.get(ns + "/rec")
	if !rec.WaitFor(time.Minute, func(b []*sink.Batch) bool { return len(b) > 0 }) {
		t.Fatal("no export within a minute: the first snapshot waited for the 10-minute debounce")
	}
	if got := rowNames(rec.Last().Envelope.Rows); got != "a" {
		t.Fatalf("first export holds %q, want a", got)
	}
}
