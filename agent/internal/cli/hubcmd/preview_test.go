package hubcmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// samplePreview is a preview of two targets answered by two clusters: one clean, one with a
// forbidden kind, extraction errors, a capped cardinality and samples; one cluster pending,
// one not connected, one that could not evaluate the bundle.
func samplePreview() *fleetv1.PreviewBundleResponse {
	deploy := func(failed, errs int64) *fleetv1.PreviewTarget {
		t := &fleetv1.PreviewTarget{Target: "team-a/deployments", Profile: "team-a/deployments", Group: "apps", Version: "v1",
			Kind: "Deployment", KindState: fleetv1.PreviewKindState_PREVIEW_KIND_STATE_SERVED, ObjectsListed: 40,
			ObjectsMatched: 31, Rows: 31 - failed, Failed: failed,
			Attributes: []*fleetv1.PreviewAttribute{
				{Name: "replicas", Values: 31 - failed, DistinctValues: 4},
				{Name: "image", Values: 31 - failed, DistinctValues: 1000, DistinctValuesCapped: true, Errors: errs},
			}}
		if errs > 0 {
			t.Attributes[1].ErrorSamples = []*fleetv1.PreviewObjectError{
				{Object: "team-a/legacy", Message: "no such key: containers"},
				{Object: "team-a/empty", Message: "index out of range"}}
			t.Samples = []*fleetv1.PreviewSample{{Object: "team-a/web", AttributesJson: `{"image":"web:1","replicas":3}`}}
		}
		return t
	}
	crons := &fleetv1.PreviewTarget{Target: "crons", Profile: "team-a/crons", Group: "batch", Version: "v1", Kind: "CronJob",
		KindState: fleetv1.PreviewKindState_PREVIEW_KIND_STATE_FORBIDDEN, Message: "cronjobs.batch is forbidden: list at the cluster scope"}
	inv := func(rows, size int64) []*fleetv1.PreviewInventory {
		return []*fleetv1.PreviewInventory{{Inventory: "team-a/workloads", Targets: []string{"team-a/deployments"}, Rows: rows, EstimatedBytes: size}}
	}
	return &fleetv1.PreviewBundleResponse{PreviewId: "pv-0a1b2c3d4e5f",
		Results: []*fleetv1.PreviewResult{
			{Cluster: "canary-east", AgentVersion: "v0.9.0", Took: durationpb.New(42 * time.Millisecond),
				Targets: []*fleetv1.PreviewTarget{deploy(0, 0)}, Inventories: inv(31, 7300)},
			{Cluster: "canary-west", AgentVersion: "v0.9.0", Took: durationpb.New(1500 * time.Millisecond),
				Targets: []*fleetv1.PreviewTarget{deploy(2, 2), crons}, Inventories: inv(29, 3_400_000)},
			{Cluster: "canary-old", Error: "KollectProfile team-a/crons: kind not allowed by this agent's allowlist"},
		},
		Pending: []string{"canary-slow"}, NotConnected: []string{"canary-gone"}}
}

func TestPreviewTableGolden(t *testing.T) {
	var b bytes.Buffer
	if err := writePreview(&b, samplePreview()); err != nil {
		t.Fatal(err)
	}
	golden(t, "preview.table.golden", b.String())
}

// TestPreviewExitFindings: errors, forbidden kinds, a failed evaluation and pending clusters
// are findings; a clean preview (not connected clusters were not asked) is not.
func TestPreviewExitFindings(t *testing.T) {
	got := strings.Join(previewProblems(samplePreview()), "; ")
	for _, want := range []string{"canary-west: target crons is forbidden", "canary-west reports extraction errors",
		"canary-old could not evaluate the bundle", "1 cluster(s) did not answer: canary-slow"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "canary-east") {
		t.Errorf("the clean cluster is blamed: %q", got)
	}
	clean := samplePreview()
	clean.Results, clean.Pending = clean.Results[:1], nil
	if p := previewProblems(clean); len(p) != 0 {
		t.Fatalf("a clean preview has problems: %v", p)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 3_400_000: "3.2 MiB", 5 << 30: "5.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
