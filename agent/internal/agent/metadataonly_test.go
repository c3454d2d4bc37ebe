package agent

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestSpecReadThroughStringIndexIsExported: `object["spec"]["replicas"]` reads the spec, so
// the watch must carry the whole object (issue 18 point 1: the text heuristic took it for a
// metadata-only profile, the watch sent no spec and the required attribute failed).
func TestSpecReadThroughStringIndexIsExported(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "metaonly")
	labels := map[string]string{"app": "web"}
	replicas := int32(3)
	create(t, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27"}}},
			},
		},
	})
	create(t,
		&kollectv1.KollectProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deploy"}, Spec: kollectv1.KollectProfileSpec{
			Target: kollectv1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: []kollectv1.Attribute{
				{Name: "name", CEL: "object.metadata.name"},
				{Name: "replicas", CEL: `object["spec"]["replicas"]`, Type: kollectv1.AttributeInt},
			},
		}},
		&kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deploy"}, Spec: kollectv1.KollectTargetSpec{
			ProfileRef: kollectv1.LocalObjectReference{Name: "deploy"},
		}},
		&kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rec"}, Spec: kollectv1.KollectSnapshotSinkSpec{
			Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: "file:///unused"},
		}},
		&kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}, Spec: kollectv1.KollectInventorySpec{
			Targets:      []kollectv1.LocalObjectReference{{Name: "deploy"}},
			Sinks:        kollectv1.SinkReferences{Snapshot: []kollectv1.LocalObjectReference{{Name: "rec"}}},
			ExportTiming: kollectv1.ExportTiming{Debounce: metav1.Duration{Duration: 200 * time.Millisecond}, MaxDelay: metav1.Duration{Duration: time.Second}},
		}},
	)
	recs := &recorders{}
	startAgent(t, nil, "c1", ns, recs)
	rec := recs.get(ns + "/rec")
	if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && len(b[len(b)-1].Envelope.Rows) == 1 }) {
		var rows string
		if last := rec.Last(); last != nil {
			rows = rowNames(last.Envelope.Rows)
		}
		t.Fatalf("the deployment was not exported (last export rows %q)", rows)
	}
	if got := string(rec.Last().Envelope.Rows[0].Attributes); got != `{"name":"web","replicas":3}` {
		t.Fatalf("attributes %s, want replicas 3", got)
	}
}
