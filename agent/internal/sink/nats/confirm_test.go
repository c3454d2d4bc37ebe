package nats

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// states decodes the stream's state messages of c1/pods, oldest first.
func (c *client) states(t *testing.T, stream string) []stateRecord {
	t.Helper()
	var out []stateRecord
	for _, m := range c.allMessages(t, stream) {
		if m.Header.Get(hEvent) != evState {
			continue
		}
		if m.Subject != stream+".c1.pods._state" || m.Header.Get(hCluster) != "c1" || m.Header.Get(hInventory) != "pods" {
			t.Fatalf("state message %d on %s, headers %v", m.Sequence, m.Subject, m.Header)
		}
		var rec stateRecord
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(hChecksum) != rec.Checksum {
			t.Fatalf("state message %d: header checksum %s, payload %s", m.Sequence, m.Header.Get(hChecksum), rec.Checksum)
		}
		out = append(out, rec)
	}
	return out
}

// TestConfirmPublishesOnlyTheStateMessage, against nats-server with JetStream: an export
// publishes the inventory's state message after its events; a confirmation publishes that
// message again with a new confirmedAt — one message on the stream, on the state subject, and
// no bucket write — keeping exportedAt; a checksum the last state message does not name, or
// an inventory without one, is ErrNotHeld and publishes nothing, also for a restarted sink.
func TestConfirmPublishesOnlyTheStateMessage(t *testing.T) {
	ctx := t.Context()
	sk := newSink(t, spec(server.URL, "CONFIRM", "confirm"), defaultEnv)
	var ex exporter
	snap := export.NewSnapshot([]export.Row{row("a", 1), row("b", 1)})
	if err := ex.Export(ctx, sk, snap); err != nil {
		t.Fatal(err)
	}
	c := dial(t, server.URL)
	states := c.states(t, "CONFIRM")
	if len(states) != 1 {
		t.Fatalf("an export published %d state messages, want 1", len(states))
	}
	first := states[0]
	if first.Checksum != snap.Checksum || first.Rows != 2 || first.ExportedAt.IsZero() || !first.ConfirmedAt.Equal(first.ExportedAt) {
		t.Fatalf("state after the export: %+v", first)
	}
	events, bucket := len(c.messages(t, "CONFIRM")), c.count(t, "KV_confirm")
	before := c.count(t, "CONFIRM")

	at := first.ExportedAt.Add(5 * time.Minute)
	if err := sk.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: snap.Checksum, At: at}); err != nil {
		t.Fatal(err)
	}
	if after := c.count(t, "CONFIRM"); after != before+1 {
		t.Fatalf("a confirmation took the stream from %d to %d messages, want one more", before, after)
	}
	if n, kv := len(c.messages(t, "CONFIRM")), c.count(t, "KV_confirm"); n != events || kv != bucket {
		t.Fatalf("a confirmation published events or bucket entries: %d → %d events, %d → %d bucket messages", events, n, bucket, kv)
	}
	states = c.states(t, "CONFIRM")
	if now := states[len(states)-1]; len(states) != 2 || !now.ConfirmedAt.Equal(at) || !now.ExportedAt.Equal(first.ExportedAt) ||
		now.Checksum != snap.Checksum || now.Rows != 2 {
		t.Fatalf("state after the confirmation: %+v (first %+v)", states, first)
	}

	before = c.count(t, "CONFIRM")
	if err := sk.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: "sha256:another", At: at}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming a checksum the state does not name: %v, want ErrNotHeld", err)
	}
	if err := sk.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "other", Checksum: snap.Checksum, At: at}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming an inventory without state: %v, want ErrNotHeld", err)
	}
	if after := c.count(t, "CONFIRM"); after != before {
		t.Fatalf("a refused confirmation published: %d → %d messages", before, after)
	}

	// A restarted sink reads the state from the stream, and so sees another writer's export.
	restarted := newSink(t, spec(server.URL, "CONFIRM", "confirm"), defaultEnv)
	at2 := at.Add(5 * time.Minute)
	if err := restarted.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: snap.Checksum, At: at2}); err != nil {
		t.Fatalf("a restarted sink confirming the checksum the stream holds: %v", err)
	}
	other := exporter{Gen: 20}
	changed := export.NewSnapshot([]export.Row{row("a", 2)})
	if err := other.Export(ctx, restarted, changed); err != nil {
		t.Fatal(err)
	}
	if err := sk.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: snap.Checksum, At: at2}); !errors.Is(err, sink.ErrNotHeld) {
		t.Fatalf("confirming after another process exported a new snapshot: %v, want ErrNotHeld", err)
	}
	// Unchanged data publishes no state either.
	before = c.count(t, "CONFIRM")
	if err := other.Export(ctx, restarted, changed); err != nil {
		t.Fatal(err)
	}
	if after := c.count(t, "CONFIRM"); after != before {
		t.Fatalf("an export of unchanged data published: %d → %d messages", before, after)
	}
}

// TestConfirmWithoutKindInTemplateIsTheConnectionTest: a template without {kind} leaves no
// subject of its own for the state, so nothing is published for it and Confirm probes.
func TestConfirmWithoutKindInTemplateIsTheConnectionTest(t *testing.T) {
	sp := spec(server.URL, "NOKIND", "")
	sp.NATS.SubjectTemplate = "NOKIND.{cluster}.{inventory}"
	sk := newSink(t, sp, defaultEnv)
	var ex exporter
	if err := ex.Export(t.Context(), sk, export.NewSnapshot([]export.Row{row("a", 1)})); err != nil {
		t.Fatal(err)
	}
	c := dial(t, server.URL)
	if n := c.count(t, "NOKIND"); n != 1 {
		t.Fatalf("stream holds %d messages, want the one event", n)
	}
	if err := sk.Confirm(t.Context(), sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: "sha256:any", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if n := c.count(t, "NOKIND"); n != 1 {
		t.Fatalf("a confirmation published: %d messages", n)
	}
}

// TestStateNamesItsWriter, against nats-server with JetStream: the state message names the
// agent version and instance of the last export or confirmation. An upgraded agent confirming
// at the very confirmedAt the state already holds (so only the writer differs, and with it the
// Nats-Msg-Id digest) publishes one message, on the state subject: the row subjects' messages
// keep their sequences and payloads, name no writer, and the bucket gets no write.
func TestStateNamesItsWriter(t *testing.T) {
	ctx := t.Context()
	sk := newSink(t, spec(server.URL, "WRITER", "writer"), defaultEnv)
	v1 := export.Writer{Version: "v0.1.0", Instance: "kollect-system@4f9c"}
	ex := exporter{Writer: v1}
	snap := export.NewSnapshot([]export.Row{row("a", 1), row("b", 1)})
	if err := ex.Export(ctx, sk, snap); err != nil {
		t.Fatal(err)
	}
	c := dial(t, server.URL)
	states := c.states(t, "WRITER")
	if len(states) != 1 || states[0].Writer != v1 {
		t.Fatalf("after an export the state messages are %+v, want one naming %+v", states, v1)
	}
	rowMessages := func() []string {
		t.Helper()
		var out []string
		for _, m := range c.messages(t, "WRITER") {
			if strings.Contains(string(m.Data), v1.Instance) {
				t.Fatalf("event %d on %s names the writer: %s", m.Sequence, m.Subject, m.Data)
			}
			out = append(out, fmt.Sprintf("%d %s %s", m.Sequence, m.Subject, m.Data))
		}
		return out
	}
	rowsBefore, bucket, before := rowMessages(), c.count(t, "KV_writer"), c.count(t, "WRITER")

	v2 := export.Writer{Version: "v0.2.0", Instance: v1.Instance}
	upgraded := newSink(t, spec(server.URL, "WRITER", "writer"), defaultEnv)
	at := states[0].ConfirmedAt
	if err := upgraded.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: snap.Checksum, At: at, Writer: v2}); err != nil {
		t.Fatal(err)
	}
	if after := c.count(t, "WRITER"); after != before+1 {
		t.Fatalf("the upgraded agent's confirmation took the stream from %d to %d messages, want one more", before, after)
	}
	states = c.states(t, "WRITER")
	if now := states[len(states)-1]; len(states) != 2 || now.Writer != v2 || !now.ConfirmedAt.Equal(at) || now.Checksum != snap.Checksum {
		t.Fatalf("after the upgraded agent's confirmation the state messages are %+v, want the last naming %+v", states, v2)
	}
	if got := rowMessages(); !slices.Equal(got, rowsBefore) {
		t.Fatalf("the upgraded agent's confirmation changed the row subjects:\n%v\n→ %v", rowsBefore, got)
	}
	if kv := c.count(t, "KV_writer"); kv != bucket {
		t.Fatalf("the upgraded agent's confirmation wrote the bucket: %d → %d messages", bucket, kv)
	}
}
