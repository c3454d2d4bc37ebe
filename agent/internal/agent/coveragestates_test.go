package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// coverageOf renders a batch's coverage as "target=state/rows/errors …" for comparisons.
func coverageOf(b *sink.Batch) string {
	var s string
	for _, c := range b.Envelope.Coverage {
		s += fmt.Sprintf("%s=%s/%d/%d ", c.Target, c.State, c.Rows, c.ExtractionErrors)
	}
	return s
}

// TestCoverageTellsUnknownFromDeleted is issue 19 point 2 on the agent: every export carries
// each target's coverage; a target whose kind stops being served keeps its last rows, and the
// sinks are told by a batch that changes only the coverage (same checksum, empty diff); a
// scope denial removes the rows and says so. The inventory's status says the same.
func TestCoverageTellsUnknownFromDeleted(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "covstates")
	ctx := context.Background()
	installCRD(t, "cov.kollect.test", "Gizmo", "gizmos")
	g := &unstructured.Unstructured{}
	g.SetAPIVersion("cov.kollect.test/v1")
	g.SetKind("Gizmo")
	g.SetNamespace(ns)
	g.SetName("g1")
	create(t, g,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1"}, Data: map[string]string{"n": "1"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c2"}}) // no n: its extraction fails
	create(t, profileTarget(ns, "cms", kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		kollectv1.Attribute{Name: "n", CEL: "int(object.data.n)", Type: kollectv1.AttributeInt})...)
	create(t, profileTarget(ns, "gizmos", kollectv1.GroupVersionKind{Group: "cov.kollect.test", Version: "v1", Kind: "Gizmo"},
		kollectv1.Attribute{Name: "name", CEL: "object.metadata.name"})...)
	create(t, recordingSink(ns), inventoryFor(ns, "inv", []string{"cms", "gizmos"}, 200*time.Millisecond))

	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)
	rec := recs.get(ns + "/rec")
	complete := fmt.Sprintf("%s/cms=complete/1/1 %s/gizmos=complete/1/0 ", ns, ns)
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && coverageOf(b[len(b)-1]) == complete }) {
		t.Fatalf("coverage of the first export: want %q, got %s", complete, describeCoverage(rec.Batches()))
	}
	first := rec.Last()
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
	statusCoverage := func(want string) {
		t.Helper()
		eventually(t, 20*time.Second, "status.coverage "+want, func() (bool, string) {
			_ = cp.Client.Get(ctx, client.ObjectKeyFromObject(inv), inv)
			got := coverageOf(&sink.Batch{Envelope: export.Envelope{Coverage: inv.Status.Coverage}})
			return got == want && len(inv.Status.Sinks) == 1 && inv.Status.Sinks[0].Coverage == export.CoverageDigest(inv.Status.Coverage), got
		})
	}
	statusCoverage(complete)

	// The gizmos' profile now names a kind the cluster does not serve: their row stays, the
	// coverage says why, and the sink gets the new coverage with the same checksum.
	p := &kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gizmos"}}
	updateObject(t, p, func() { p.Spec.Target.Kind = "Doohickey" })
	unserved := fmt.Sprintf("%s/cms=complete/1/1 %s/gizmos=kindNotServed/1/0 ", ns, ns)
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return coverageOf(b[len(b)-1]) == unserved }) {
		t.Fatalf("coverage once the kind is not served: want %q, got %s", unserved, describeCoverage(rec.Batches()))
	}
	last := rec.Last()
	if last.Envelope.Checksum != first.Envelope.Checksum || last.PreviousChecksum != first.Envelope.Checksum ||
		!last.Diff.Empty() || sortedRowNames(last.Envelope.Rows) != "c1,g1" {
		t.Fatalf("a coverage-only change must keep the rows and checksum: checksum %s→%s, diff %+v, rows %s",
			export.ShortChecksum(first.Envelope.Checksum), export.ShortChecksum(last.Envelope.Checksum),
			last.Diff, sortedRowNames(last.Envelope.Rows))
	}
	for _, c := range last.Envelope.Coverage {
		if c.State == kollectv1.CoverageKindNotServed && c.Reason == "" {
			t.Fatal("an unknown target's coverage must say why")
		}
	}
	statusCoverage(unserved)

	// A scope that permits ConfigMaps only: the gizmos' rows leave the sink, and coverage says
	// a scope denied them rather than that they were deleted.
	setScope(t, ns, allowConfigMaps(ns))
	denied := fmt.Sprintf("%s/cms=complete/1/1 %s/gizmos=deniedByScope/0/0 ", ns, ns)
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return coverageOf(b[len(b)-1]) == denied }) {
		t.Fatalf("coverage once a scope denies the gizmos: want %q, got %s", denied, describeCoverage(rec.Batches()))
	}
	if got := sortedRowNames(rec.Last().Envelope.Rows); got != "c1" {
		t.Fatalf("rows of a denied target must leave the export: %s", got)
	}
	statusCoverage(denied)
}

func describeCoverage(batches []*sink.Batch) string {
	s := fmt.Sprintf("%d batches:", len(batches))
	for _, b := range batches {
		s += fmt.Sprintf("\n  %s rows=%s coverage=%s", export.ShortChecksum(b.Envelope.Checksum), sortedRowNames(b.Envelope.Rows), coverageOf(b))
	}
	return s
}
