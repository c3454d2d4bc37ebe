package kafka

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// stateRecords decodes the state records of c1/pods, oldest first, as kcat reads them.
func stateRecords(t *testing.T, topic string) []stateRecord {
	t.Helper()
	var out []stateRecord
	for _, m := range kcatAll(t, broker.Addr, topic)[stateKey("c1", "pods")] {
		if m.header(hEvent) != evState || m.Payload == nil {
			t.Fatalf("record %s@%d under the state key: headers %v", m.Key, m.Offset, m.Headers)
		}
		var rec stateRecord
		if err := json.Unmarshal([]byte(*m.Payload), &rec); err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// TestConfirmProducesOnlyTheStateRecord, against kfake (a stand-in for Kafka): an export
// produces the inventory's state record after its events; a confirmation produces that record
// again with a new confirmedAt — one record on the topic, no row's — and keeps exportedAt; a
// checksum the state record does not name is ErrNotHeld and produces nothing, also for a
// restarted sink that reads the state back from the topic.
func TestConfirmProducesOnlyTheStateRecord(t *testing.T) {
	ctx := t.Context()
	sk := newSink(t, spec(broker.Addr, "confirm"), sink.Env{})
	var ex exporter
	snap := export.NewSnapshot([]export.Row{row("a", 1), row("b", 1)})
	if err := ex.Export(ctx, sk, snap); err != nil {
		t.Fatal(err)
	}
	states := stateRecords(t, "confirm")
	if len(states) != 1 {
		t.Fatalf("an export produced %d state records, want 1", len(states))
	}
	first := states[0]
	if first.Checksum != snap.Checksum || first.Rows != 2 || first.ExportedAt.IsZero() || !first.ConfirmedAt.Equal(first.ExportedAt) {
		t.Fatalf("state record after the export: %+v", first)
	}
	rowsBefore := kcat(t, broker.Addr, "confirm")
	before := endOffsets(t, "confirm")

	at := first.ExportedAt.Add(5 * time.Minute)
	if err := sk.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: snap.Checksum, At: at}); err != nil {
		t.Fatal(err)
	}
	if after := endOffsets(t, "confirm"); after != before+1 {
		t.Fatalf("a confirmation moved the topic's end offsets %d → %d, want one record", before, after)
	}
	if got := kcat(t, broker.Addr, "confirm"); len(got) != len(rowsBefore) || len(got["c1/pods/pods/a"]) != len(rowsBefore["c1/pods/pods/a"]) ||
		len(got["c1/pods/pods/b"]) != len(rowsBefore["c1/pods/pods/b"]) {
		t.Fatalf("a confirmation produced row records: %v", got)
	}
	states = stateRecords(t, "confirm")
	if len(states) != 2 {
		t.Fatalf("%d state records after a confirmation, want 2", len(states))
	}
	if now := states[1]; !now.ConfirmedAt.Equal(at) || !now.ExportedAt.Equal(first.ExportedAt) || now.Checksum != snap.Checksum || now.Rows != 2 {
		t.Fatalf("state record after the confirmation: %+v (first %+v)", now, first)
	}

	before = endOffsets(t, "confirm")
	err := sk.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: "sha256:another", At: at})
	if !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming a checksum the state does not name: %v, want ErrNotHeld", err)
	}
	if err := sk.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "other", Checksum: snap.Checksum, At: at}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming an inventory without a state record: %v, want ErrNotHeld", err)
	}
	if after := endOffsets(t, "confirm"); after != before {
		t.Fatalf("a refused confirmation produced records: end offsets %d → %d", before, after)
	}

	// Another process (a restarted agent) knows nothing in memory: it reads the state record
	// back from the topic, and sees a write by someone else.
	restarted := newSink(t, spec(broker.Addr, "confirm"), sink.Env{})
	at2 := at.Add(5 * time.Minute)
	if err := restarted.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: snap.Checksum, At: at2}); err != nil {
		t.Fatalf("a restarted sink confirming the checksum the topic holds: %v", err)
	}
	if err := restarted.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: "sha256:another", At: at2}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("a restarted sink confirming another checksum: %v, want ErrNotHeld", err)
	}
	other := exporter{Gen: 20}
	changed := export.NewSnapshot([]export.Row{row("a", 2)})
	if err := other.Export(ctx, restarted, changed); err != nil {
		t.Fatal(err)
	}
	if err := sk.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: snap.Checksum, At: at2}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming after another process exported a new snapshot: %v, want ErrNotHeld", err)
	}
	if last := stateRecords(t, "confirm"); last[len(last)-1].Checksum != changed.Checksum {
		t.Fatalf("the latest state record names %s, want the new snapshot's", last[len(last)-1].Checksum)
	}

	// Unchanged data: the state record is not produced again.
	before = endOffsets(t, "confirm")
	if err := other.Export(ctx, restarted, changed); err != nil {
		t.Fatal(err)
	}
	if after := endOffsets(t, "confirm"); after != before {
		t.Fatalf("an export of unchanged data produced records: %d → %d", before, after)
	}
}

// TestStateNamesItsWriter, against kfake (a stand-in for Kafka): the state record names the
// agent version and instance of the last export or confirmation; an upgraded agent's
// confirmation renames the writer with one record, the state record, and produces no row
// record (the row records' offsets and values stay as they were, and name no writer).
func TestStateNamesItsWriter(t *testing.T) {
	ctx := t.Context()
	sk := newSink(t, spec(broker.Addr, "writer"), sink.Env{})
	v1 := export.Writer{Version: "v0.1.0", Instance: "kollect-system@4f9c"}
	ex := exporter{Writer: v1}
	snap := export.NewSnapshot([]export.Row{row("a", 1), row("b", 1)})
	if err := ex.Export(ctx, sk, snap); err != nil {
		t.Fatal(err)
	}
	states := stateRecords(t, "writer")
	if len(states) != 1 || states[0].Writer != v1 {
		t.Fatalf("after an export the state records are %+v, want one naming %+v", states, v1)
	}
	rowsBefore := kcat(t, broker.Addr, "writer")
	for key, msgs := range rowsBefore {
		for _, m := range msgs {
			if m.Payload != nil && strings.Contains(*m.Payload, v1.Instance) {
				t.Fatalf("row record %s@%d names the writer: %s", key, m.Offset, *m.Payload)
			}
		}
	}
	before := endOffsets(t, "writer")

	v2 := export.Writer{Version: "v0.2.0", Instance: v1.Instance}
	upgraded := newSink(t, spec(broker.Addr, "writer"), sink.Env{})
	at := states[0].ExportedAt.Add(5 * time.Minute)
	if err := upgraded.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: snap.Checksum, At: at, Writer: v2}); err != nil {
		t.Fatal(err)
	}
	if after := endOffsets(t, "writer"); after != before+1 {
		t.Fatalf("the upgraded agent's confirmation moved the end offsets %d → %d, want one record", before, after)
	}
	states = stateRecords(t, "writer")
	if now := states[len(states)-1]; now.Writer != v2 || !now.ConfirmedAt.Equal(at) || now.Checksum != snap.Checksum {
		t.Fatalf("after the upgraded agent's confirmation the state record is %+v, want writer %+v", now, v2)
	}
	if got := kcat(t, broker.Addr, "writer"); !reflect.DeepEqual(got, rowsBefore) {
		t.Fatalf("the upgraded agent's confirmation changed the row records:\n%v\n→ %v", rowsBefore, got)
	}
}
