package hubclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
	"kollect.dev/testenv"
)

// previewHub is a test double of the hub's AgentService (the hub module's server cannot be
// imported from the agent module; the e2e suite runs the real kollect-hub): its WatchConfig
// stream sends what the test puts in send, and ReportPreview hands each answer to answers.
type previewHub struct {
	fleetv1connect.UnimplementedAgentServiceHandler
	send    chan *fleetv1.WatchConfigResponse
	answers chan *fleetv1.ReportPreviewRequest
}

func (p *previewHub) WatchConfig(ctx context.Context, _ *connect.Request[fleetv1.WatchConfigRequest], s *connect.ServerStream[fleetv1.WatchConfigResponse]) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-p.send:
			if err := s.Send(m); err != nil {
				return err
			}
		}
	}
}

func (p *previewHub) ReportPreview(_ context.Context, req *connect.Request[fleetv1.ReportPreviewRequest]) (*connect.Response[fleetv1.ReportPreviewResponse], error) {
	p.answers <- req.Msg
	return connect.NewResponse(&fleetv1.ReportPreviewResponse{}), nil
}

const currentBundle = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: current}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes: [{name: n, jsonPath: "{.metadata.name}"}]
`

const previewed = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: candidate}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes: [{name: app, jsonPath: "{.metadata.labels.app}"}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: candidate}
spec: {profileRef: {name: candidate}}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectInventory
metadata: {name: candidate}
spec: {targets: [{name: candidate}]}
`

// TestPreviewOnTheStreamIsAnsweredAndAppliesNothing: a preview repeating the configuration in
// force is evaluated and answered with ReportPreview, and the API server's counters show no
// write of any Kollect object; a preview arriving with a changed configuration applies the
// change (never the preview's manifests); one arriving while another is evaluated is answered
// "busy".
func TestPreviewOnTheStreamIsAnsweredAndAppliesNothing(t *testing.T) {
	cp, err := testenv.Start("hubclient-preview", testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kollect"}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"web", "db"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect", Name: n, Labels: map[string]string{"app": n}}}
		if err := cp.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	hub := &previewHub{send: make(chan *fleetv1.WatchConfigResponse, 4), answers: make(chan *fleetv1.ReportPreviewRequest, 4)}
	mux := http.NewServeMux()
	mux.Handle(fleetv1connect.NewAgentServiceHandler(hub))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer cancel() // the stream ends before the server closes, which waits for it

	o := Options{Cluster: "east", AllowedNamespaces: []string{"kollect"}, DefaultNamespace: "kollect", AgentVersion: "test", Log: logr.Discard()}
	h := &Client{o: o, c: cp.Client, cfg: cp.Config, applier: NewApplier(cp.Client, o), previewing: make(chan struct{}, 1),
		api: fleetv1connect.NewAgentServiceClient(srv.Client(), srv.URL)}
	current := &fleetv1.WatchConfigResponse{ConfigDigest: "cfg-1", Bundles: []*fleetv1.BundleAssignment{
		{Bundle: "base", Revision: 1, Digest: "d1", Manifests: currentBundle}}}
	if err := h.applier.Apply(ctx, current); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = h.watchOnce(ctx) }()

	var kollectResources []string
	for _, k := range kollectv1.Kinds {
		kollectResources = append(kollectResources, k.Resource)
	}
	before, err := cp.Writes(ctx, kollectResources...)
	if err != nil {
		t.Fatal(err)
	}
	hub.send <- &fleetv1.WatchConfigResponse{ConfigDigest: current.ConfigDigest, Bundles: current.Bundles,
		Preview: &fleetv1.PreviewRequest{Id: "p1", Manifests: previewed}}
	got := answer(t, hub)
	after, err := cp.Writes(ctx, kollectResources...)
	if err != nil {
		t.Fatal(err)
	}
	res := got.GetResult()
	if got.GetClusterName() != "east" || res.GetPreviewId() != "p1" || res.GetError() != "" || len(res.GetTargets()) != 1 ||
		res.GetTargets()[0].GetRows() != 2 || res.GetTargets()[0].GetTarget() != "kollect/candidate" {
		t.Fatalf("answer: %v", got)
	}
	if after != before {
		t.Errorf("the API server served %d writes of Kollect objects for a preview", after-before)
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "kollect", Name: "candidate"}, &kollectv1.KollectProfile{}); !apierrors.IsNotFound(err) {
		t.Errorf("the previewed profile exists on the cluster: %v", err)
	}

	// A real change in the same message is applied as any configuration is.
	changed := &fleetv1.WatchConfigResponse{ConfigDigest: "cfg-2", Bundles: []*fleetv1.BundleAssignment{
		{Bundle: "base", Revision: 2, Digest: "d2", Manifests: strings.Replace(currentBundle, "name: n,", "name: name,", 1)}},
		Preview: &fleetv1.PreviewRequest{Id: "p2", Manifests: previewed}}
	hub.send <- changed
	if got := answer(t, hub); got.GetResult().GetPreviewId() != "p2" || got.GetResult().GetError() != "" {
		t.Errorf("second answer: %v", got)
	}
	if _, digest, _ := h.applier.Snapshot(); digest != "cfg-2" {
		t.Errorf("applied digest %q, want the changed configuration cfg-2", digest)
	}
	p := &kollectv1.KollectProfile{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "kollect", Name: "current"}, p); err != nil || p.Spec.Attributes[0].Name != "name" {
		t.Errorf("the changed bundle is not applied: %v %v", err, p.Spec.Attributes)
	}

	// One evaluation at a time: with the token held, a preview is answered busy at once.
	h.previewing <- struct{}{}
	h.startPreview(ctx, &fleetv1.PreviewRequest{Id: "p3", Manifests: previewed})
	if got := answer(t, hub); got.GetResult().GetPreviewId() != "p3" || !strings.HasPrefix(got.GetResult().GetError(), "busy") {
		t.Errorf("answer while busy: %v", got)
	}
	<-h.previewing
}

func answer(t *testing.T, hub *previewHub) *fleetv1.ReportPreviewRequest {
	t.Helper()
	select {
	case got := <-hub.answers:
		return got
	case <-time.After(30 * time.Second): // a deadline for a lost answer, not a timing assertion
		t.Fatal("no ReportPreview within 30s")
		return nil
	}
}
