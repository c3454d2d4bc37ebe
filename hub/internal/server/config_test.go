package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

const goodBundle = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata:
  name: deployments
  namespace: team-a
spec:
  target: {group: apps, version: v1, kind: Deployment}
  attributes:
    - name: replicas
      jsonPath: "{.spec.replicas}"
      type: int
    - name: images
      cel: "object.spec.template.spec.containers.map(c, c.image)"
      type: list
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata:
  name: deployments
  namespace: team-a
spec:
  profileRef: {name: deployments}
  match: "object.spec.replicas > 0"
`

func prodOnly() *fleetv1.LabelSelector {
	return &fleetv1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
}

func TestBadCELBundleRefusedWithObjectName(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	bad := strings.Replace(goodBundle, "c.image)", "c.image", 1)
	_, err := h.admin.ApplyBundle(context.Background(), connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "base", Manifests: bad}))
	ce := wantCode(t, err, connect.CodeInvalidArgument, "bundle with a bad CEL expression")
	if !strings.Contains(ce.Message(), "KollectProfile team-a/deployments: spec.attributes[1] (images).cel: CEL compile error") {
		t.Fatalf("message does not name the object and expression: %q", ce.Message())
	}
	if strings.Contains(ce.Message(), "KollectTarget") {
		t.Fatalf("the valid object was blamed too: %q", ce.Message())
	}
	list, err := h.admin.ListBundles(context.Background(), connect.NewRequest(&fleetv1.ListBundlesRequest{}))
	if err != nil || len(list.Msg.GetBundles()) != 0 {
		t.Fatalf("a refused bundle was stored: %v %v", list.Msg.GetBundles(), err)
	}
}

func TestWatchConfigFollowsBundles(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false)
	prod, _ := h.register(t, tok.GetSecret(), "prod-1", map[string]string{"env": "prod"})
	dev, _ := h.register(t, tok.GetSecret(), "dev-1", map[string]string{"env": "dev"})
	prodStream, devStream := watch(t, prod), watch(t, dev)
	if first := prodStream.next(t); len(first.GetBundles()) != 0 || first.GetConfigDigest() == "" {
		t.Fatalf("first message before any bundle: %v", first)
	}
	devStream.next(t)

	applied, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "base", Manifests: goodBundle, ClusterSelector: prodOnly(), Message: "first"}))
	if err != nil {
		t.Fatal(err)
	}
	if r := applied.Msg; !r.GetCreated() || r.GetRevision().GetRevision() != 1 || strings.Join(r.GetSelectedClusters(), ",") != "prod-1" {
		t.Fatalf("apply: %v", r)
	}
	got := prodStream.next(t)
	if len(got.GetBundles()) != 1 || got.GetBundles()[0].GetRevision() != 1 || got.GetBundles()[0].GetManifests() != goodBundle ||
		len(got.GetBundles()[0].GetObjects()) != 2 {
		t.Fatalf("prod-1 got %v", got)
	}

	// Uploading the same content again creates nothing and sends nothing.
	again, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "base", Manifests: goodBundle, ClusterSelector: prodOnly()}))
	if err != nil || again.Msg.GetCreated() || again.Msg.GetRevision().GetRevision() != 1 {
		t.Fatalf("identical apply: %v %v", again.Msg, err)
	}

	// A bundle for everyone reaches dev-1 too, which proves dev-1 never got "base".
	all := strings.ReplaceAll(goodBundle, "team-a", "team-b")
	if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: "common", Manifests: all})); err != nil {
		t.Fatal(err)
	}
	if d := devStream.next(t); len(d.GetBundles()) != 1 || d.GetBundles()[0].GetBundle() != "common" {
		t.Fatalf("dev-1 got %v", d)
	}
	if p := prodStream.next(t); len(p.GetBundles()) != 2 {
		t.Fatalf("prod-1 got %v", p)
	}

	// A new revision reaches the selected agent; the diff shows the change.
	v2 := strings.Replace(goodBundle, "replicas > 0", "replicas > 1", 1)
	if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "base", Manifests: v2, ClusterSelector: prodOnly()})); err != nil {
		t.Fatal(err)
	}
	if p := prodStream.next(t); p.GetBundles()[0].GetBundle() != "base" || p.GetBundles()[0].GetRevision() != 2 {
		t.Fatalf("prod-1 got %v", p)
	}
	diff, err := h.admin.DiffBundleRevisions(ctx, connect.NewRequest(&fleetv1.DiffBundleRevisionsRequest{Name: "base"}))
	if err != nil {
		t.Fatal(err)
	}
	if d := diff.Msg.GetUnifiedDiff(); !strings.Contains(d, `-  match: "object.spec.replicas > 0"`) ||
		!strings.Contains(d, `+  match: "object.spec.replicas > 1"`) || diff.Msg.GetFromRevision() != 1 {
		t.Fatalf("diff:\n%s", d)
	}
	hist, err := h.admin.ListBundleRevisions(ctx, connect.NewRequest(&fleetv1.ListBundleRevisionsRequest{Name: "base"}))
	if err != nil || len(hist.Msg.GetRevisions()) != 2 || hist.Msg.GetRevisions()[1].GetMessage() != "first" ||
		hist.Msg.GetRevisions()[1].GetCreatedBy() != "token:admin" {
		t.Fatalf("history: %v %v", hist.Msg, err)
	}
	old, err := h.admin.GetBundle(ctx, connect.NewRequest(&fleetv1.GetBundleRequest{Name: "base", Revision: 1}))
	if err != nil || old.Msg.GetRevision().GetManifests() != goodBundle || old.Msg.GetBundle().GetLatestRevision() != 2 {
		t.Fatalf("revision 1: %v %v", old.Msg, err)
	}

	// A cluster joining later gets what its labels select, in its first message.
	late, _ := h.register(t, tok.GetSecret(), "prod-2", map[string]string{"env": "prod"})
	if l := watch(t, late).next(t); len(l.GetBundles()) != 2 || l.GetBundles()[0].GetRevision() != 2 {
		t.Fatalf("late joiner got %v", l)
	}

	// Deleting a bundle sends configurations without it (agents prune).
	if _, err := h.admin.DeleteBundle(ctx, connect.NewRequest(&fleetv1.DeleteBundleRequest{Name: "common"})); err != nil {
		t.Fatal(err)
	}
	if d := devStream.next(t); len(d.GetBundles()) != 0 {
		t.Fatalf("dev-1 after delete: %v", d)
	}

	// Dry run stores nothing.
	dry, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "base", Manifests: goodBundle, DryRun: true}))
	if err != nil || !dry.Msg.GetCreated() || dry.Msg.GetRevision().GetRevision() != 3 || len(dry.Msg.GetSelectedClusters()) != 3 {
		t.Fatalf("dry run: %v %v", dry.Msg, err)
	}
	if b, _ := h.admin.GetBundle(ctx, connect.NewRequest(&fleetv1.GetBundleRequest{Name: "base"})); b.Msg.GetBundle().GetLatestRevision() != 2 {
		t.Fatalf("dry run stored a revision: %v", b.Msg)
	}
}

func TestRelabelAndDeleteCluster(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false)
	agent, _ := h.register(t, tok.GetSecret(), "edge-1", map[string]string{"env": "dev"})
	stream := watch(t, agent)
	stream.next(t)
	if _, err := h.admin.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{
		Name: "base", Manifests: goodBundle, ClusterSelector: prodOnly()})); err != nil {
		t.Fatal(err)
	}
	viewer := h.apiToken(t, "dashboard", fleetv1.Role_ROLE_VIEWER)
	_, err := viewer.SetClusterLabels(ctx, connect.NewRequest(&fleetv1.SetClusterLabelsRequest{ClusterName: "edge-1"}))
	wantCode(t, err, connect.CodePermissionDenied, "viewer relabelling")

	// Relabelled into the selector: the bundle arrives.
	resp, err := h.admin.SetClusterLabels(ctx, connect.NewRequest(&fleetv1.SetClusterLabelsRequest{
		ClusterName: "edge-1", Labels: map[string]string{"env": "prod"}}))
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Msg.GetCluster(); c.GetLabels()["env"] != "prod" || len(c.GetBundles()) != 1 {
		t.Fatalf("relabelled cluster: %v", c)
	}
	if got := stream.next(t); len(got.GetBundles()) != 1 || got.GetBundles()[0].GetBundle() != "base" {
		t.Fatalf("after relabelling: %v", got)
	}
	_, err = h.admin.SetClusterLabels(ctx, connect.NewRequest(&fleetv1.SetClusterLabelsRequest{
		ClusterName: "edge-1", Labels: map[string]string{"bad key!": "x"}}))
	wantCode(t, err, connect.CodeInvalidArgument, "invalid label")

	// Deleted: the stream ends, the agent is refused, the cluster is gone from the lists.
	if _, err := h.admin.DeleteCluster(ctx, connect.NewRequest(&fleetv1.DeleteClusterRequest{ClusterName: "edge-1"})); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stream.err:
		wantCode(t, err, connect.CodeUnauthenticated, "stream of a deleted cluster")
	case <-time.After(10 * time.Second):
		t.Fatal("stream of a deleted cluster stayed open")
	}
	_, err = agent.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{Status: &fleetv1.AgentStatus{}}))
	wantCode(t, err, connect.CodeUnauthenticated, "heartbeat of a deleted cluster")
	list, err := viewer.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	if err != nil || len(list.Msg.GetClusters()) != 0 {
		t.Fatalf("clusters after delete: %v %v", list.Msg, err)
	}
	_, err = h.admin.DeleteCluster(ctx, connect.NewRequest(&fleetv1.DeleteClusterRequest{ClusterName: "edge-1"}))
	wantCode(t, err, connect.CodeNotFound, "deleting twice")
}
