package hubclient

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// missingSinkCluster holds an inventory naming three database sinks — db, which exists and
// exports (the control), gone, which does not exist, and pending, which exists but has no
// export status yet — and a snapshot sink that does not exist; a cluster inventory names gone
// too. The agent binds no missing sink, so the statuses report db alone.
func missingSinkCluster(t *testing.T, funcs interceptor.Funcs) client.Reader {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := kollectv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	exported := metav1.Now()
	db := func(name string) *kollectv1.KollectDatabaseSink {
		return &kollectv1.KollectDatabaseSink{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name},
			Spec: kollectv1.KollectDatabaseSinkSpec{Type: kollectv1.DatabaseSinkPostgres}}
	}
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "pods"},
		Spec: kollectv1.KollectInventorySpec{Sinks: kollectv1.SinkReferences{
			Database: []kollectv1.LocalObjectReference{{Name: "db"}, {Name: "gone"}, {Name: "pending"}},
			Snapshot: []kollectv1.LocalObjectReference{{Name: "repo"}}}},
		Status: kollectv1.KollectInventoryStatus{Sinks: []kollectv1.SinkExportStatus{{
			Family: kollectv1.SinkFamilyDatabase, Name: "db", LastExportTime: &exported}}}}
	cinv := &kollectv1.KollectClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "nodes"},
		Spec: kollectv1.KollectClusterInventorySpec{Sinks: kollectv1.ClusterSinkReferences{
			Database: []kollectv1.NamespacedObjectReference{{Namespace: "team", Name: "gone"}}}}}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(db("db"), db("pending"), inv, cinv).
		WithInterceptorFuncs(funcs).Build()
}

// TestHeartbeatReportsASinkThatDoesNotExist: a sink an inventory names that does not exist is
// in the heartbeat, marked not found with a terminal error naming every inventory that names
// it; the existing sink beside it is reported as before, and an existing sink without an
// export status yet adds nothing.
func TestHeartbeatReportsASinkThatDoesNotExist(t *testing.T) {
	_, sinks, err := collectStatus(t.Context(), missingSinkCluster(t, interceptor.Funcs{}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*fleetv1.SinkStatus{}
	for _, s := range sinks {
		got[s.Kind+" "+s.Namespace+"/"+s.Name] = s
	}
	if len(got) != 3 {
		t.Fatalf("heartbeat sinks %v, want db, gone and repo", got)
	}
	if db := got["KollectDatabaseSink team/db"]; db == nil || db.NotFound || db.LastError != "" || db.GetLastSuccessTime() == nil {
		t.Errorf("the existing sink: %v", db)
	}
	gone := got["KollectDatabaseSink team/gone"]
	if gone == nil || !gone.NotFound || gone.ErrorClass != fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL {
		t.Fatalf("the missing database sink: %v", gone)
	}
	if !strings.HasPrefix(gone.LastError, "sink not found") || !strings.HasSuffix(gone.LastError, "named by inventory nodes, team/pods") {
		t.Errorf("the missing sink's error %q does not say it is not found and by whom it is named", gone.LastError)
	}
	if repo := got["KollectSnapshotSink team/repo"]; repo == nil || !repo.NotFound || !strings.Contains(repo.LastError, "team/pods") {
		t.Errorf("the missing snapshot sink: %v", repo)
	}
}

// TestHeartbeatReportsNoMissingSinkItCouldNotRead: a sink whose read fails for another reason
// than its absence (a cache not synced yet) is not reported missing, while the sink whose
// absence was read is (the control).
func TestHeartbeatReportsNoMissingSinkItCouldNotRead(t *testing.T) {
	funcs := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*kollectv1.KollectDatabaseSink); ok && key.Name == "gone" {
			return errors.New("the cache is not synced yet")
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	_, sinks, err := collectStatus(t.Context(), missingSinkCluster(t, funcs))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range sinks {
		if s.NotFound {
			names = append(names, s.Name)
		}
	}
	if strings.Join(names, ",") != "repo" {
		t.Fatalf("sinks reported not found: %v, want repo alone", names)
	}
}
