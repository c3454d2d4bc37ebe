package hubclient

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestHeartbeatCarriesEachSinksLastAttemptAndError: a sink failing for two inventories is one
// heartbeat entry with the newest success, the newest attempt (later than the success while it
// fails) and the error with its class.
func TestHeartbeatCarriesEachSinksLastAttemptAndError(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := kollectv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	at := func(s int) *metav1.Time { tm := metav1.NewTime(time.Unix(1_800_000_000+int64(s), 0)); return &tm }
	sinkObj := &kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "db"},
		Spec: kollectv1.KollectDatabaseSinkSpec{Type: kollectv1.DatabaseSinkPostgres}}
	inv := func(name string, exported, attempted int, lastErr string) *kollectv1.KollectInventory {
		return &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name},
			Status: kollectv1.KollectInventoryStatus{Sinks: []kollectv1.SinkExportStatus{{
				Family: kollectv1.SinkFamilyDatabase, Name: "db", LastExportTime: at(exported), LastAttemptTime: at(attempted),
				LastError: lastErr, ErrorClass: kollectv1.SinkErrorCircuitOpen}}}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(sinkObj,
		inv("pods", 10, 95, "connecting to 127.0.0.1:5432: connection refused"),
		inv("deployments", 20, 90, "connecting to 127.0.0.1:5432: connection refused")).Build()
	_, sinks, err := collectStatus(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(sinks) != 1 {
		t.Fatalf("heartbeat has %d sinks, want the one both inventories use: %v", len(sinks), sinks)
	}
	s := sinks[0]
	if s.Kind != "KollectDatabaseSink" || s.Namespace != "team" || s.Name != "db" || s.Type != "postgres" {
		t.Errorf("sink identity = %s %s/%s type %q", s.Kind, s.Namespace, s.Name, s.Type)
	}
	if got := s.GetLastSuccessTime().AsTime(); !got.Equal(at(20).Time) {
		t.Errorf("last_success_time = %s, want the newest export %s", got, at(20).Time)
	}
	if got := s.GetLastAttemptTime().AsTime(); !got.Equal(at(95).Time) {
		t.Errorf("last_attempt_time = %s, want the newest attempt %s", got, at(95).Time)
	}
	if s.LastError == "" || s.ErrorClass != fleetv1.SinkErrorClass_SINK_ERROR_CLASS_CIRCUIT_OPEN {
		t.Errorf("last_error %q class %s, want the error with circuit open", s.LastError, s.ErrorClass)
	}
}

// TestHeartbeatConfirmationIsTheOldestOfTheSinksInventories: a sink is as current as the
// least recently confirmed inventory exporting to it; one inventory without a confirmation
// leaves it unconfirmed, so the hub falls back to the last export.
func TestHeartbeatConfirmationIsTheOldestOfTheSinksInventories(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := kollectv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	at := func(s int) *metav1.Time { tm := metav1.NewTime(time.Unix(1_800_000_000+int64(s), 0)); return &tm }
	inv := func(name, sinkName string, confirmed *metav1.Time) *kollectv1.KollectInventory {
		return &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name},
			Status: kollectv1.KollectInventoryStatus{Sinks: []kollectv1.SinkExportStatus{{
				Family: kollectv1.SinkFamilyDatabase, Name: sinkName, LastExportTime: at(10), LastConfirmTime: confirmed}}}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		inv("pods", "db", at(70)), inv("deployments", "db", at(50)),
		inv("nodes", "other", at(80)), inv("new", "other", nil)).Build()
	_, sinks, err := collectStatus(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*fleetv1.SinkStatus{}
	for _, s := range sinks {
		got[s.Name] = s
	}
	if ts := got["db"].GetLastConfirmTime(); ts == nil || !ts.AsTime().Equal(at(50).Time) {
		t.Errorf("db: last_confirm_time %v, want the older confirmation %s", ts, at(50).Time)
	}
	if ts := got["other"].GetLastConfirmTime(); ts != nil {
		t.Errorf("other: last_confirm_time %v, want unset while an inventory has no confirmation", ts)
	}
}
