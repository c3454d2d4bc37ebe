package sink

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/api/v1alpha1"
)

// Object is a sink object as the agent reads it from the API server: a
// *v1alpha1.KollectSnapshotSink, *v1alpha1.KollectDatabaseSink or *v1alpha1.KollectEventSink.
// It is an alias so that backends name it through the contract alone.
type Object = client.Object

// The Spec functions give a backend the spec of its family. A wrong kind means a table entry
// under the wrong family: a terminal error, since no retry can fix it.

// SnapshotSpec returns the spec of a KollectSnapshotSink.
func SnapshotSpec(obj Object) (*v1alpha1.KollectSnapshotSinkSpec, error) {
	s, ok := obj.(*v1alpha1.KollectSnapshotSink)
	if !ok {
		return nil, Terminalf("a snapshot sink needs a KollectSnapshotSink, got %T", obj)
	}
	return &s.Spec, nil
}

// DatabaseSpec returns the spec of a KollectDatabaseSink.
func DatabaseSpec(obj Object) (*v1alpha1.KollectDatabaseSinkSpec, error) {
	s, ok := obj.(*v1alpha1.KollectDatabaseSink)
	if !ok {
		return nil, Terminalf("a database sink needs a KollectDatabaseSink, got %T", obj)
	}
	return &s.Spec, nil
}

// EventSpec returns the spec of a KollectEventSink.
func EventSpec(obj Object) (*v1alpha1.KollectEventSinkSpec, error) {
	s, ok := obj.(*v1alpha1.KollectEventSink)
	if !ok {
		return nil, Terminalf("an event sink needs a KollectEventSink, got %T", obj)
	}
	return &s.Spec, nil
}
