package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestProbeTriggers: a sink's own status write does not probe it again; a spec change, a
// label or an annotation (kollect.dev/probe-now), a create and a delete do.
func TestProbeTriggers(t *testing.T) {
	base := &kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "db", Generation: 1, ResourceVersion: "10"}}
	changed := func(edit func(s *kollectv1.KollectDatabaseSink)) *kollectv1.KollectDatabaseSink {
		s := base.DeepCopy()
		s.ResourceVersion = "11"
		edit(s)
		return s
	}
	cases := map[string]struct {
		new  *kollectv1.KollectDatabaseSink
		want bool
	}{
		"status only": {changed(func(s *kollectv1.KollectDatabaseSink) {
			s.Status.Conditions = []metav1.Condition{{Type: kollectv1.ConditionReady, Status: metav1.ConditionTrue}}
		}), false},
		"spec": {changed(func(s *kollectv1.KollectDatabaseSink) { s.Generation = 2 }), true},
		"probe-now": {changed(func(s *kollectv1.KollectDatabaseSink) {
			s.Annotations = map[string]string{kollectv1.AnnotationProbeNow: "now"}
		}), true},
		"labels": {changed(func(s *kollectv1.KollectDatabaseSink) { s.Labels = map[string]string{"team": "a"} }), true},
	}
	for name, c := range cases {
		if got := probeTriggers.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: c.new}); got != c.want {
			t.Errorf("%s: probeTriggers passed %t, want %t", name, got, c.want)
		}
	}
	if !probeTriggers.Create(event.CreateEvent{Object: base}) || !probeTriggers.Delete(event.DeleteEvent{Object: base}) {
		t.Error("probeTriggers drops a create or a delete")
	}
}
