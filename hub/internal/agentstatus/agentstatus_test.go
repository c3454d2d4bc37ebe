package agentstatus_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"kollect.dev/hub/internal/agentstatus"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// status is an agent's heartbeat as the fleet simulator sends it: two bundles of eight
// objects, three inventories, two sinks.
func status() *fleetv1.AgentStatus {
	now := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	st := &fleetv1.AgentStatus{AgentVersion: "v0.9.0", KubernetesVersion: "v1.37.2", ConfigDigest: "sha256:0123456789abcdef",
		ObservedAt: timestamppb.New(now)}
	for b := range 2 {
		ab := &fleetv1.AppliedBundle{Bundle: fmt.Sprint("bundle-", b), Revision: 3, Digest: "sha256:fedcba9876543210"}
		for o := range 8 {
			ab.Objects = append(ab.Objects, &fleetv1.ObjectResult{Object: &fleetv1.ObjectRef{ApiVersion: "kollect.dev/v1alpha1",
				Kind: "KollectInventory", Namespace: "team-a", Name: fmt.Sprint("inventory-", o)},
				Result: fleetv1.ApplyResult_APPLY_RESULT_APPLIED})
		}
		st.Bundles = append(st.Bundles, ab)
	}
	for i := range 3 {
		st.Inventories = append(st.Inventories, &fleetv1.InventoryStatus{Namespace: "team-a", Name: fmt.Sprint("inventory-", i),
			ItemCount: 1200, Conditions: []*fleetv1.Condition{
				{Type: "Ready", Status: "True", Reason: "Exported", Message: "last export succeeded", LastTransitionTime: timestamppb.New(now.Add(-time.Hour))},
				{Type: "Degraded", Status: "False", Reason: "AsExpected", Message: "every target is readable", LastTransitionTime: timestamppb.New(now.Add(-time.Hour))}},
			Coverage: []*fleetv1.TargetCoverage{{Target: "team-a/all", State: "complete", Rows: 1200}}})
	}
	for s := range 2 {
		st.Sinks = append(st.Sinks, &fleetv1.SinkStatus{Kind: "KollectDatabaseSink", Namespace: "team-a", Name: fmt.Sprint("pg-", s),
			Type: "postgres", LastAttemptTime: timestamppb.New(now), LastSuccessTime: timestamppb.New(now.Add(-time.Minute))})
	}
	return st
}

func TestRoundTrip(t *testing.T) {
	want := status()
	stored, err := agentstatus.Encode(want)
	if err != nil {
		t.Fatal(err)
	}
	got := &fleetv1.AgentStatus{}
	if err := agentstatus.Decode(stored, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("decoded %v, want %v", got, want)
	}
	again, err := agentstatus.Encode(want)
	if err != nil || again != stored {
		t.Fatalf("the same status encoded twice differs (%v)", err)
	}
}

// TestDecodesJSONOfOlderHubs: rows written before the binary form hold protobuf JSON.
func TestDecodesJSONOfOlderHubs(t *testing.T) {
	want := status()
	raw, err := protojson.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got := &fleetv1.AgentStatus{}
	if err := agentstatus.Decode(string(raw), got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("decoded %v, want %v", got, want)
	}
}

func TestCorruptStatusIsAnError(t *testing.T) {
	for _, stored := range []string{"{not json", "not base64!", "AAAA"} {
		if err := agentstatus.Decode(stored, &fleetv1.AgentStatus{}); err == nil {
			t.Errorf("Decode(%q) returned no error", stored)
		}
	}
}

// BenchmarkEncode compares the stored form with the protobuf JSON it replaced.
func BenchmarkEncode(b *testing.B) {
	st := status()
	b.Run("base64-protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := agentstatus.Encode(st); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := protojson.Marshal(st); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	st := status()
	stored, err := agentstatus.Encode(st)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := protojson.Marshal(st)
	if err != nil {
		b.Fatal(err)
	}
	for name, s := range map[string]string{"base64-protobuf": stored, "protojson": string(raw)} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := agentstatus.Decode(s, &fleetv1.AgentStatus{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
