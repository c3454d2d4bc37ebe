package hubcmd

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// The cluster renderers run on answers shaped like the hub's; e2e/charts (TestJoinWithoutHelm)
// runs `kollect hub clusters` against a real hub and a real agent refused by its RBAC.

var clustersNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func sampleClusters() ([]*fleetv1.Cluster, []notApplied) {
	clusters := []*fleetv1.Cluster{
		{Name: "east", State: fleetv1.ClusterState_CLUSTER_STATE_ONLINE, AgentVersion: "v0.9.0", KubernetesVersion: "v1.34.1",
			LastHeartbeat: timestamppb.New(clustersNow.Add(-3 * time.Second)),
			Bundles:       []*fleetv1.ClusterBundle{{Bundle: "fleet", DesiredRevision: 1, AppliedRevision: 1, FailedObjects: 2}}},
		{Name: "west", State: fleetv1.ClusterState_CLUSTER_STATE_ONLINE, AgentVersion: "v0.9.0", KubernetesVersion: "v1.34.1",
			ConfigInSync: true, LastHeartbeat: timestamppb.New(clustersNow.Add(-1 * time.Second)),
			Bundles: []*fleetv1.ClusterBundle{{Bundle: "fleet", DesiredRevision: 1, AppliedRevision: 1}}},
	}
	problems := []notApplied{
		{Cluster: "east", Bundle: "fleet", Result: "APPLY_RESULT_FAILED", ref: &fleetv1.ObjectRef{Kind: "KollectProfile", Namespace: "kollect-fleet", Name: "configmaps"},
			Object: json.RawMessage(`{"kind":"KollectProfile","namespace":"kollect-fleet","name":"configmaps"}`),
			Message: `server-side apply of KollectProfile kollect-fleet/configmaps: kollectprofiles.kollect.dev "configmaps" is forbidden: ` +
				`User "system:serviceaccount:kollect-system:kollect-agent" cannot patch resource "kollectprofiles" in API group "kollect.dev" in the namespace "kollect-fleet"`},
		{Cluster: "east", Bundle: "fleet", Result: "APPLY_RESULT_REFUSED", ref: &fleetv1.ObjectRef{Kind: "KollectClusterScope", Name: "wide"},
			Object:  json.RawMessage(`{"kind":"KollectClusterScope","name":"wide"}`),
			Message: "KollectClusterScope is the cluster admin's: this agent accepts no scopes from the hub (its owner may allow them with --hub-allow-scopes)"},
	}
	return clusters, problems
}

// TestClustersShowWhyObjectsWereNotApplied: the table counts each cluster's objects not
// applied and lists them below with their reasons; --json carries the same under
// objectsNotApplied, beside the hub's own answer.
func TestClustersShowWhyObjectsWereNotApplied(t *testing.T) {
	clusters, problems := sampleClusters()
	var b bytes.Buffer
	if err := writeClusters(&b, clusters, problems, clustersNow); err != nil {
		t.Fatal(err)
	}
	golden(t, "clusters.table.golden", b.String())

	b.Reset()
	if err := writeClustersJSON(&b, &fleetv1.ListClustersResponse{Clusters: clusters}, problems); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Clusters          []map[string]any `json:"clusters"`
		ObjectsNotApplied []struct {
			Cluster, Bundle, Result, Message string
			Object                           map[string]string
		} `json:"objectsNotApplied"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(doc.Clusters) != 2 || len(doc.ObjectsNotApplied) != 2 {
		t.Fatalf("JSON: %s", b.String())
	}
	first := doc.ObjectsNotApplied[0]
	if first.Cluster != "east" || first.Object["name"] != "configmaps" || !strings.Contains(first.Message, `cannot patch resource "kollectprofiles"`) {
		t.Errorf("first object not applied: %+v", first)
	}

	// Nothing not applied: the table alone, and an empty list in JSON.
	b.Reset()
	if err := writeClusters(&b, clusters[1:], nil, clustersNow); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Objects not applied") {
		t.Errorf("a clean fleet lists objects not applied:\n%s", b.String())
	}
	b.Reset()
	if err := writeClustersJSON(&b, &fleetv1.ListClustersResponse{Clusters: clusters[1:]}, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"objectsNotApplied": []`) {
		t.Errorf("JSON of a clean fleet: %s", b.String())
	}
}
