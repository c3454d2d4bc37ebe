package bigquery

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// contenderOf reads the state row's writer, its last write and the contender mark.
func contenderOf(t *testing.T, ds string) (holder, contender export.Writer, last, contended time.Time) {
	t.Helper()
	rows := query(t, "SELECT agent_version, agent_instance, exported_at, confirmed_at, contender_version, contender_instance, contended_at FROM `"+
		server.Project+"."+ds+".rows_state` WHERE cluster = 'east' AND inventory = 'apps'")
	if len(rows) != 1 {
		t.Fatalf("%d state rows, want 1", len(rows))
	}
	r := rows[0]
	holder.Version, _ = r[0].(string)
	holder.Instance, _ = r[1].(string)
	last, _ = r[2].(time.Time)
	if c, ok := r[3].(time.Time); ok && c.After(last) {
		last = c
	}
	contender.Version, _ = r[4].(string)
	contender.Instance, _ = r[5].(string)
	contended, _ = r[6].(time.Time)
	return holder, contender, last, contended
}

// TestSecondWriterIsRefused, against the BigQuery emulator (a stand-in): two agents of
// cluster "east" (two instances) export one inventory into one dataset. The second's export
// and confirmation are refused with ErrWriterConflict: one query job, the contender mark, is
// all they write (the rows table keeps its row count and every updated_at, the state its
// checksum and writer). The first's next confirmation and export succeed and report the
// contention. Once the first has not written for the window, the second takes over, and then
// the first is refused.
func TestSecondWriterIsRefused(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	s1, _ := newSink(t, ds, "east")
	s2, rec2 := newSink(t, ds, "east")
	w1 := export.Writer{Version: "v1.0.0", Instance: "kollect@1111"}
	w2 := export.Writer{Version: "v1.1.0", Instance: "kollect@2222"}
	const window = time.Minute
	first := &agent{sink: s1, cluster: "east", inventory: "apps", writer: w1}
	second := &agent{sink: s2, cluster: "east", inventory: "apps", writer: w2}
	if err := first.export(ctx, mkRows("east", 10, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s2.ensureProvisioned(ctx); err != nil {
		t.Fatal(err)
	}
	rowsBefore, countBefore := rowsOf(t, ds, ""), rowCount(t, ds)
	sumBefore, exportedBefore, _ := stateOf(t, ds)
	_, _, lastBefore, _ := contenderOf(t, ds)

	rec2.Calls()
	b := second.batch(mkRows("east", 4, 2))
	b.ConflictWindow = window
	err := s2.Export(ctx, b)
	var refusal *sink.WriterConflictError
	if !errors.As(err, &refusal) || refusal.Holder != w1 || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("the second agent's export: %v, want a terminal *WriterConflictError naming %s", err, w1.Instance)
	}
	if !strings.Contains(err.Error(), w2.Instance) || !strings.Contains(err.Error(), "--cluster-name east") {
		t.Errorf("the refusal %q does not name the refused agent and the cluster name", err)
	}
	if m := mutations(rec2.Calls()); len(m) != 1 || m["POST /projects/"+server.Project+"/jobs"] != 1 {
		t.Fatalf("the refused export made %v, want one query job (the contender mark)", m)
	}
	assertRowsUnchanged(t, ds, rowsBefore, countBefore)
	holder, contender, last, contended := contenderOf(t, ds)
	if sum, exported, _ := stateOf(t, ds); sum != sumBefore || !exported.Equal(exportedBefore) || holder != w1 || !last.Equal(lastBefore) {
		t.Fatalf("the refused export changed the state: checksum %s, writer %+v, last write %v", sum, holder, last)
	}
	if contender != w2 || contended.IsZero() {
		t.Fatalf("the state's contender mark after the refusal: %+v at %v, want %+v", contender, contended, w2)
	}
	err = s2.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: sumBefore, At: time.Now().UTC(), Writer: w2, ConflictWindow: window})
	if !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the second agent's confirmation: %v, want ErrWriterConflict", err)
	}
	if holder, _, last, _ := contenderOf(t, ds); holder != w1 || !last.Equal(lastBefore) {
		t.Fatalf("the refused confirmation changed the state: writer %+v, last write %v", holder, last)
	}

	at := time.Now().UTC().Truncate(time.Microsecond)
	err = s1.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: first.lastChecksum, At: at, Writer: w1, ConflictWindow: window})
	var contendedErr *sink.ContendedError
	if !errors.As(err, &contendedErr) || contendedErr.Contender != w2 {
		t.Fatalf("the holder's confirmation: %v, want a *sink.ContendedError naming %s", err, w2.Instance)
	}
	if _, _, last, _ := contenderOf(t, ds); !last.Equal(at) {
		t.Fatalf("the holder's contended confirmation did not move confirmed_at: %v, want %v", last, at)
	}
	b = first.batch(mkRows("east", 10, 3))
	b.ConflictWindow = window
	if err := s1.Export(ctx, b); !errors.As(err, &contendedErr) {
		t.Fatalf("the holder's export: %v, want a *sink.ContendedError", err)
	}
	first.accept()
	if sum, _, _ := stateOf(t, ds); sum != first.lastChecksum || rowCount(t, ds) != 10 {
		t.Fatalf("the holder's contended export is not in the sink: checksum %s, %d rows", sum, rowCount(t, ds))
	}
	_, _, _, contended = contenderOf(t, ds)
	err = s1.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: first.lastChecksum, At: contended.Add(window), Writer: w1,
		ConflictWindow: window})
	if err != nil {
		t.Fatalf("the holder's confirmation a window after the contention: %v, want nil", err)
	}

	_, _, last, _ = contenderOf(t, ds)
	b = second.batch(mkRows("east", 4, 2))
	b.ConflictWindow, b.Envelope.ExportedAt = window, last.Add(window)
	if err := s2.Export(ctx, b); err != nil {
		t.Fatalf("the second agent's export a window after the first's last write: %v, want it taken over", err)
	}
	second.accept()
	if holder, _, _, _ := contenderOf(t, ds); holder != w2 || rowCount(t, ds) != 4 {
		t.Fatalf("after the takeover the state names %+v with %d rows, want the second and its 4", holder, rowCount(t, ds))
	}
	b = first.batch(mkRows("east", 10, 4))
	b.ConflictWindow, b.Envelope.ExportedAt = window, last.Add(window+time.Second)
	if err := s1.Export(ctx, b); !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the first agent, back after the takeover: %v, want ErrWriterConflict", err)
	}
}
