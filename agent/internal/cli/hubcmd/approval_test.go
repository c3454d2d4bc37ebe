package hubcmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestClustersShowNewRegistrations: a cluster pending approval is PENDING APPROVAL in the
// table, with no in-sync verdict, and is listed below it with the bootstrap token, its
// creator, the address and agent version it registered with, beside a cluster approved at
// once an hour ago and one an admin approved; a cluster registered days ago is not new, and
// a fleet without new registrations prints no such list.
func TestClustersShowNewRegistrations(t *testing.T) {
	ago := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(clustersNow.Add(-d)) }
	clusters := []*fleetv1.Cluster{
		{Name: "old", State: fleetv1.ClusterState_CLUSTER_STATE_ONLINE, AgentVersion: "v0.9.0", ConfigInSync: true,
			Approval: fleetv1.ClusterApproval_CLUSTER_APPROVAL_APPROVED, RegisteredAt: ago(72 * time.Hour), LastHeartbeat: ago(time.Second),
			Registration: &fleetv1.Registration{BootstrapTokenId: "0ld0ld0ld0ld", PeerAddress: "10.0.0.9"}},
		{Name: "recent", State: fleetv1.ClusterState_CLUSTER_STATE_ONLINE, AgentVersion: "v0.9.0", ConfigInSync: true,
			Approval: fleetv1.ClusterApproval_CLUSTER_APPROVAL_APPROVED, RegisteredAt: ago(time.Hour), LastHeartbeat: ago(time.Second),
			Registration: &fleetv1.Registration{BootstrapTokenId: "a1b2c3d4e5f6", BootstrapTokenDescription: "for recent",
				BootstrapTokenCreatedBy: "token:admin", PeerAddress: "10.0.0.7", AgentVersion: "v0.9.0"}},
		{Name: "reviewed", State: fleetv1.ClusterState_CLUSTER_STATE_ONLINE, AgentVersion: "v0.9.0", ConfigInSync: true,
			Approval: fleetv1.ClusterApproval_CLUSTER_APPROVAL_APPROVED, RegisteredAt: ago(3 * time.Hour), LastHeartbeat: ago(time.Second),
			Registration: &fleetv1.Registration{BootstrapTokenId: "9f8e7d6c5b4a", BootstrapTokenDescription: "team laptops",
				BootstrapTokenCreatedBy: "token:admin", PeerAddress: "192.0.2.4", AgentVersion: "v0.9.0", DecidedBy: "token:alice",
				DecidedAt: ago(2 * time.Hour)}},
		{Name: "stranger", State: fleetv1.ClusterState_CLUSTER_STATE_ONLINE, AgentVersion: "v6.6.6",
			Approval: fleetv1.ClusterApproval_CLUSTER_APPROVAL_PENDING, RegisteredAt: ago(5 * time.Minute), LastHeartbeat: ago(2 * time.Second),
			Registration: &fleetv1.Registration{BootstrapTokenId: "9f8e7d6c5b4a", BootstrapTokenDescription: "team laptops",
				BootstrapTokenCreatedBy: "token:admin", PeerAddress: "203.0.113.7", AgentVersion: "v6.6.6"}},
	}
	var b bytes.Buffer
	if err := writeClusters(&b, clusters, nil, clustersNow); err != nil {
		t.Fatal(err)
	}
	golden(t, "clusters.registrations.golden", b.String())

	b.Reset()
	if err := writeClusters(&b, clusters[:1], nil, clustersNow); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "New registrations") {
		t.Errorf("a fleet without new registrations lists some:\n%s", b.String())
	}
}
