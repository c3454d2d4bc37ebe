package sink

import (
	"testing"

	"kollect.dev/api/v1alpha1"
)

// TestSpecOfWrongKindIsTerminal checks a backend handed an object of another family (a table
// entry under the wrong key) fails terminally instead of panicking.
func TestSpecOfWrongKindIsTerminal(t *testing.T) {
	db := &v1alpha1.KollectDatabaseSink{Spec: v1alpha1.KollectDatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres}}
	if _, err := SnapshotSpec(db); err == nil || ClassOf(err) != Terminal {
		t.Fatalf("SnapshotSpec(database sink) = %v, want a terminal error", err)
	}
	if _, err := EventSpec(db); err == nil || ClassOf(err) != Terminal {
		t.Fatalf("EventSpec(database sink) = %v, want a terminal error", err)
	}
	spec, err := DatabaseSpec(db)
	if err != nil || spec != &db.Spec {
		t.Fatalf("DatabaseSpec = %p, %v; want the object's own spec", spec, err)
	}
}
