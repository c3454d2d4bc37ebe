package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"
)

func canary() *fleetv1.LabelSelector {
	return &fleetv1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}
}

func previewReq(timeout time.Duration) *fleetv1.PreviewBundleRequest {
	return &fleetv1.PreviewBundleRequest{Bundle: "base", Manifests: goodBundle, ClusterSelector: canary(),
		Timeout: durationpb.New(timeout)}
}

// metric reads one sample of the hub's /metrics ("name" or `name{label="v"}`) with token.
func metric(t *testing.T, h *testHub, token, sample string) float64 {
	t.Helper()
	body := scrapeWith(t, h, token)
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	t.Fatalf("no %s on /metrics", sample)
	return 0
}

// TestPreviewAnswered: the selected online clusters' agents receive the preview on their
// stream in a message repeating their configuration (same digest, nothing to apply) and
// answer; PreviewBundle returns their answers sorted, the silent agent as pending and the
// cluster without a heartbeat as not connected; GetPreview later shows the late answer.
func TestPreviewAnswered(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	ring := func(r string) map[string]string { return map[string]string{"ring": r, "fleet": "yes"} }
	c2 := h.startAgent(t, tok, "canary-2", ring("canary"), 0, healthy)
	c1 := h.startAgent(t, tok, "canary-1", ring("canary"), 0, healthy)
	slow := h.startAgent(t, tok, "canary-slow", ring("canary"), 0, healthy)
	slow.mute.Store(true)
	prod := h.startAgent(t, tok, "prod-1", ring("prod"), 0, healthy)
	// Registered, never connected: pending on the hub, so not asked.
	h.register(t, tok, "canary-new", ring("canary"))
	rev := h.apply(t, 1, false)
	waitAgents(t, rev, c1, c2, slow, prod)
	h.waitOnline(t, c1, c2, slow, prod)
	before := map[string]int64{}
	for _, a := range []*simAgent{c1, c2, slow, prod} {
		before[a.name] = a.configs.Load()
	}

	resp, err := h.admin.PreviewBundle(ctx, connect.NewRequest(previewReq(3*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Msg
	var answered []string
	for _, r := range got.GetResults() {
		answered = append(answered, r.GetCluster())
		if r.GetPreviewId() != got.GetPreviewId() || len(r.GetTargets()) != 1 || r.GetTargets()[0].GetObjectsMatched() != 10 ||
			r.GetTargets()[0].GetAttributes()[1].GetErrorSamples()[0].GetObject() != "team-a/broken" ||
			r.GetInventories()[0].GetEstimatedBytes() != 2048 {
			t.Fatalf("answer of %s: %v", r.GetCluster(), r)
		}
	}
	if !slices.Equal(answered, []string{"canary-1", "canary-2"}) || !slices.Equal(got.GetPending(), []string{"canary-slow"}) ||
		!slices.Equal(got.GetNotConnected(), []string{"canary-new"}) {
		t.Fatalf("answered %v pending %v not connected %v", answered, got.GetPending(), got.GetNotConnected())
	}
	for _, a := range []*simAgent{c1, c2, slow} {
		seen := a.previewsSeen()
		if len(seen) != 1 {
			t.Fatalf("%s received %d previews, want 1", a.name, len(seen))
		}
		msg, cfg := seen[0], a.config()
		if msg.GetPreview().GetId() != got.GetPreviewId() || msg.GetPreview().GetManifests() != goodBundle ||
			msg.GetConfigDigest() != cfg.GetConfigDigest() || len(msg.GetBundles()) != len(cfg.GetBundles()) ||
			msg.GetPreview().GetDeadline() == nil {
			t.Fatalf("%s: the preview came as %v with config digest %s, the agent holds %s", a.name, msg.GetPreview(),
				msg.GetConfigDigest(), cfg.GetConfigDigest())
		}
	}
	if n := len(prod.previewsSeen()); n != 0 {
		t.Fatalf("prod-1 was not selected and received %d previews", n)
	}
	for _, a := range []*simAgent{c1, c2, slow, prod} {
		if n := a.configs.Load(); n != before[a.name] {
			t.Fatalf("%s received %d new configurations with the preview, want none", a.name, n-before[a.name])
		}
	}

	// The slow agent answers after the requester stopped waiting: GetPreview shows it.
	if _, err := slow.client.ReportPreview(ctx, connect.NewRequest(&fleetv1.ReportPreviewRequest{ClusterName: "canary-slow",
		Result: previewAnswer("canary-slow", slow.previewsSeen()[0].GetPreview())})); err != nil {
		t.Fatal(err)
	}
	again, err := h.admin.GetPreview(ctx, connect.NewRequest(&fleetv1.GetPreviewRequest{PreviewId: got.GetPreviewId()}))
	if err != nil {
		t.Fatal(err)
	}
	if p := again.Msg.GetPreview(); len(p.GetResults()) != 3 || len(p.GetPending()) != 0 || p.GetResults()[2].GetCluster() != "canary-slow" ||
		!slices.Equal(p.GetNotConnected(), []string{"canary-new"}) {
		t.Fatalf("GetPreview after the late answer: %v", p)
	}
	// Audited as a mutation with the bundle, selector and number of clusters asked.
	audit, err := h.admin.ListAuditEvents(ctx, connect.NewRequest(&fleetv1.ListAuditEventsRequest{Limit: 100}))
	if err != nil {
		t.Fatal(err)
	}
	var detail []string
	for _, e := range audit.Msg.GetEvents() {
		if e.GetTarget() == "preview/"+got.GetPreviewId() {
			detail = append(detail, e.GetAction()+" "+e.GetDetail())
		}
	}
	if len(detail) != 1 || !strings.Contains(detail[0], `PreviewBundle bundle="base" selector="ring=canary" clusters asked=3 not connected=1`) {
		t.Fatalf("audit of the preview: %q", detail)
	}
	if n := metric(t, h, h.srv.AdminToken, "kollect_hub_previews_total"); n != 1 {
		t.Fatalf("kollect_hub_previews_total %v, want 1", n)
	}
	if n := metric(t, h, h.srv.AdminToken, `kollect_hub_preview_answers_total{result="evaluated"}`); n != 3 {
		t.Fatalf(`kollect_hub_preview_answers_total{result="evaluated"} %v, want 3`, n)
	}

	// Every asked cluster answering ends the wait before the timeout: the test's own deadline
	// (10 s in eventually) would not pass with the hub waiting the full minute.
	slow.mute.Store(false)
	done := make(chan error, 1)
	go func() {
		r, err := h.admin.PreviewBundle(ctx, connect.NewRequest(previewReq(time.Minute)))
		if err == nil && len(r.Msg.GetPending()) != 0 {
			err = fmt.Errorf("pending %v", r.Msg.GetPending())
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("PreviewBundle still waiting 30 s after its clusters were asked, though every one answers")
	}
}

// TestPreviewRefusals: bad requests, the viewer role, answers to unknown previews, from
// clusters not asked or too large, and expiry.
func TestPreviewRefusals(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	c1 := h.startAgent(t, tok, "canary-1", map[string]string{"ring": "canary"}, 0, healthy)
	c1.mute.Store(true)
	other := h.startAgent(t, tok, "prod-1", map[string]string{"ring": "prod"}, 0, healthy)
	h.apply(t, 1, false) // selects nobody (fleet=yes): a heartbeat on the empty configuration makes them online
	h.waitOnline(t, c1, other)

	for name, req := range map[string]*fleetv1.PreviewBundleRequest{
		"no selector":      {Manifests: goodBundle},
		"empty selector":   {Manifests: goodBundle, ClusterSelector: &fleetv1.LabelSelector{}},
		"too many samples": {Manifests: goodBundle, ClusterSelector: canary(), MaxSamples: 6},
		"long timeout":     {Manifests: goodBundle, ClusterSelector: canary(), Timeout: durationpb.New(61 * time.Second)},
		"bad manifests":    {Manifests: strings.Replace(goodBundle, "c.image)", "c.image", 1), ClusterSelector: canary()},
		"bad bundle name":  {Bundle: "Not_A_Name", Manifests: goodBundle, ClusterSelector: canary()},
	} {
		_, err := h.admin.PreviewBundle(ctx, connect.NewRequest(req))
		wantCode(t, err, connect.CodeInvalidArgument, name)
	}
	_, err := h.admin.PreviewBundle(ctx, connect.NewRequest(&fleetv1.PreviewBundleRequest{Manifests: goodBundle,
		ClusterSelector: &fleetv1.LabelSelector{MatchLabels: map[string]string{"ring": "nowhere"}}}))
	wantCode(t, err, connect.CodeFailedPrecondition, "a selector that selects no cluster")

	viewer := h.apiToken(t, "watcher", fleetv1.Role_ROLE_VIEWER)
	_, err = viewer.PreviewBundle(ctx, connect.NewRequest(previewReq(time.Second)))
	wantCode(t, err, connect.CodePermissionDenied, "PreviewBundle as viewer")
	_, err = viewer.GetPreview(ctx, connect.NewRequest(&fleetv1.GetPreviewRequest{PreviewId: "pv-x"}))
	wantCode(t, err, connect.CodePermissionDenied, "GetPreview as viewer")
	_, err = h.admin.GetPreview(ctx, connect.NewRequest(&fleetv1.GetPreviewRequest{PreviewId: "pv-x"}))
	wantCode(t, err, connect.CodeNotFound, "GetPreview of an unknown preview")

	resp, err := h.admin.PreviewBundle(ctx, connect.NewRequest(previewReq(200*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Msg.GetPreviewId()
	if !slices.Equal(resp.Msg.GetPending(), []string{"canary-1"}) || len(resp.Msg.GetResults()) != 0 {
		t.Fatalf("a mute agent's preview: %v", resp.Msg)
	}
	report := func(a fleetv1connect.AgentServiceClient, cluster, id string, mutate func(*fleetv1.PreviewResult)) error {
		r := previewAnswer(cluster, &fleetv1.PreviewRequest{Id: id})
		if mutate != nil {
			mutate(r)
		}
		_, err := a.ReportPreview(ctx, connect.NewRequest(&fleetv1.ReportPreviewRequest{ClusterName: cluster, Result: r}))
		return err
	}
	wantCode(t, report(c1.client, "canary-1", "pv-unknown", nil), connect.CodeNotFound, "answer to an unknown preview")
	wantCode(t, report(other.client, "prod-1", id, nil), connect.CodePermissionDenied, "answer from a cluster not asked")
	wantCode(t, report(c1.client, "prod-1", id, nil), connect.CodeFailedPrecondition, "answer under another cluster name")
	wantCode(t, report(c1.client, "canary-1", id, func(r *fleetv1.PreviewResult) { r.Cluster = "prod-1" }),
		connect.CodeInvalidArgument, "answer naming another cluster in the result")
	big := func(r *fleetv1.PreviewResult) {
		r.Targets[0].Samples = []*fleetv1.PreviewSample{{Object: "team-a/huge", AttributesJson: strings.Repeat("x", 1<<20)}}
	}
	wantCode(t, report(c1.client, "canary-1", id, big), connect.CodeInvalidArgument, "an answer over the size limit")
	if n := metric(t, h, h.srv.AdminToken, `kollect_hub_preview_answers_total{result="refused"}`); n != 4 {
		t.Fatalf(`kollect_hub_preview_answers_total{result="refused"} %v, want 4`, n)
	}
	// Samples beyond the preview's max_samples (0 here) are not kept.
	if err := report(c1.client, "canary-1", id, func(r *fleetv1.PreviewResult) {
		r.Targets[0].Samples = []*fleetv1.PreviewSample{{Object: "team-a/web", AttributesJson: `{"replicas":3}`}}
	}); err != nil {
		t.Fatal(err)
	}
	got, err := h.admin.GetPreview(ctx, connect.NewRequest(&fleetv1.GetPreviewRequest{PreviewId: id}))
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Msg.GetPreview().GetResults(); len(r) != 1 || len(r[0].GetTargets()[0].GetSamples()) != 0 {
		t.Fatalf("a sample the preview did not ask for was kept: %v", r)
	}
	if err := report(c1.client, "canary-1", id, func(r *fleetv1.PreviewResult) { r.Targets, r.Error = nil, "not allowed" }); err != nil {
		t.Fatal(err)
	}
	if n := metric(t, h, h.srv.AdminToken, `kollect_hub_preview_answers_total{result="evaluated"}`); n != 1 {
		t.Fatalf(`kollect_hub_preview_answers_total{result="evaluated"} %v, want 1`, n)
	}
	if n := metric(t, h, h.srv.AdminToken, `kollect_hub_preview_answers_total{result="failed"}`); n != 1 {
		t.Fatalf(`kollect_hub_preview_answers_total{result="failed"} %v, want 1`, n)
	}

	// 15 minutes later the preview is gone: answers and reads are refused.
	h.clock.Advance(15*time.Minute + time.Second)
	wantCode(t, report(c1.client, "canary-1", id, nil), connect.CodeNotFound, "answer to an expired preview")
	_, err = h.admin.GetPreview(ctx, connect.NewRequest(&fleetv1.GetPreviewRequest{PreviewId: id}))
	wantCode(t, err, connect.CodeNotFound, "GetPreview of an expired preview")
}

// TestPreviewReachesAReconnectedStream: an agent whose stream ends while a preview waits for
// it (a reconnect, a failover) gets the preview again on its next stream, after its
// configuration, and its answer ends the wait.
func TestPreviewReachesAReconnectedStream(t *testing.T) {
	t.Parallel()
	h := startHub(t, "")
	ctx := context.Background()
	tok := h.bootstrapToken(t, time.Hour, 0, false).GetSecret()
	agent, _ := h.register(t, tok, "canary-1", map[string]string{"ring": "canary"})
	if _, err := agent.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{
		Status: &fleetv1.AgentStatus{AgentVersion: "v0.1.0"}})); err != nil {
		t.Fatal(err)
	}
	h.waitOnlineNames(t, "canary-1")
	first := watch(t, agent)
	cfg := first.next(t)

	type answer struct {
		resp *fleetv1.PreviewBundleResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := h.admin.PreviewBundle(ctx, connect.NewRequest(previewReq(time.Minute)))
		if err != nil {
			done <- answer{err: err}
			return
		}
		done <- answer{resp: r.Msg}
	}()
	asked := first.next(t).GetPreview()
	if asked == nil {
		t.Fatal("the first stream's next message carries no preview")
	}
	first.cancel()

	second := watch(t, agent)
	if got := second.next(t); got.GetPreview() != nil || got.GetConfigDigest() != cfg.GetConfigDigest() {
		t.Fatalf("the new stream's first message: %v, want the configuration", got)
	}
	if again := second.next(t).GetPreview(); again.GetId() != asked.GetId() {
		t.Fatalf("the new stream got preview %v, want %s again", again, asked.GetId())
	}
	if _, err := agent.ReportPreview(ctx, connect.NewRequest(&fleetv1.ReportPreviewRequest{ClusterName: "canary-1",
		Result: previewAnswer("canary-1", asked)})); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-done:
		if a.err != nil || len(a.resp.GetResults()) != 1 || len(a.resp.GetPending()) != 0 {
			t.Fatalf("PreviewBundle: %v %v", a.resp, a.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("PreviewBundle still waiting 30 s after the only asked cluster answered")
	}
}
