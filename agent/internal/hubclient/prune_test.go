package hubclient

import (
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

// TestPruneStaysWhereBundlesMayWrite: two agents share one API server, each confined to its
// namespace (--hub-namespaces), each with the same bundle. When one agent's configuration
// empties, it prunes its own namespace's object and leaves the other agent's alone, although
// both carry the hub's managed-by label.
func TestPruneStaysWhereBundlesMayWrite(t *testing.T) {
	cp, err := testenv.Start("hubclient-prune", testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	ctx := t.Context()
	appliers := map[string]*Applier{}
	for _, ns := range []string{"team-a", "team-b"} {
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		appliers[ns] = NewApplier(cp.Client, Options{Cluster: ns, AllowedNamespaces: []string{ns}, DefaultNamespace: ns, Log: logr.Discard()})
	}
	cfg := func(rev int64, manifests string) *fleetv1.WatchConfigResponse {
		return &fleetv1.WatchConfigResponse{ConfigDigest: "d", Bundles: []*fleetv1.BundleAssignment{
			{Bundle: "ops", Revision: rev, Digest: "d", Manifests: manifests}}}
	}
	const bundle = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: shared}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: color, jsonPath: "{.data.color}", optional: true}
`
	for _, ns := range []string{"team-a", "team-b"} {
		if err := appliers[ns].Apply(ctx, cfg(1, bundle)); err != nil {
			t.Fatal(err)
		}
		checkResults(t, appliers[ns], map[string]string{"KollectProfile " + ns + "/shared": "APPLIED"})
	}
	if err := appliers["team-a"].Apply(ctx, cfg(2, "")); err != nil {
		t.Fatal(err)
	}
	var p kollectv1.KollectProfile
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "shared"}, &p); !apierrors.IsNotFound(err) {
		t.Errorf("team-a's agent emptied its configuration but its profile is still there: %v", err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "shared"}, &p); err != nil {
		t.Errorf("team-a's agent pruned team-b's hub-managed profile, outside its --hub-namespaces: %v", err)
	}
}
