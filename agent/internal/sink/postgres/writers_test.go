package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// TestSecondWriterIsRefused: two agents of cluster "east" (two instances) export one
// inventory into one database. The second's export and confirmation are refused with
// ErrWriterConflict: no row is written (every row's xmin stays), the state keeps the first's
// checksum and writer and gains only the contender mark. The first's next confirmation and
// export succeed and report the contention. Once the first has not written for the window,
// the second takes over, and then the first is the one refused.
func TestSecondWriterIsRefused(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s1, _ := newSink(t, db, "east")
	s2, rec2 := newSink(t, db, "east")
	w1 := export.Writer{Version: "v1.0.0", Instance: "kollect@1111"}
	w2 := export.Writer{Version: "v1.1.0", Instance: "kollect@2222"}
	const window = time.Minute
	first := &agent{sink: s1, cluster: "east", inventory: "apps", writer: w1}
	second := &agent{sink: s2, cluster: "east", inventory: "apps", writer: w2}
	if err := first.export(ctx, sinktest.Deployments("east", "apps", 20, 1)); err != nil {
		t.Fatal(err)
	}
	pool := connect(t, db)
	type stateRow struct {
		checksum, version, instance, contVersion, contInstance string
		lastWrite                                              time.Time
		contendedAt                                            *time.Time
	}
	state := func() stateRow {
		t.Helper()
		var r stateRow
		if err := pool.QueryRow(ctx, `SELECT checksum, agent_version, agent_instance, greatest(exported_at, confirmed_at),
       contender_version, contender_instance, contended_at FROM kollect.rows_state WHERE cluster = 'east' AND inventory = 'apps'`).
			Scan(&r.checksum, &r.version, &r.instance, &r.lastWrite, &r.contVersion, &r.contInstance, &r.contendedAt); err != nil {
			t.Fatal(err)
		}
		return r
	}
	xmins := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT string_agg(uid || '@' || xmin::text, ',' ORDER BY uid) FROM kollect.rows`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	rowsBefore, stBefore := xmins(), state()
	if stBefore.contendedAt != nil || stBefore.contInstance != "" {
		t.Fatalf("a fresh state carries a contender mark: %+v", stBefore)
	}

	// The second agent's export: refused, and only the mark is written.
	rec2.take()
	b := second.batch(sinktest.Deployments("east", "apps", 5, 2))
	b.ConflictWindow = window
	err := s2.Export(ctx, b)
	var refusal *sink.WriterConflictError
	if !errors.Is(err, sink.ErrWriterConflict) || !errors.As(err, &refusal) || refusal.Holder != w1 || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("the second agent's export: %v, want a terminal *WriterConflictError naming %s", err, w1.Instance)
	}
	for _, want := range []string{w1.Instance, w2.Instance, "east/apps", "--cluster-name east"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	if w := writes(rec2.take()); len(w) != 1 || !strings.Contains(w[0], "contender_instance") {
		t.Fatalf("the refused export wrote %q, want only the contender mark", w)
	}
	if after := xmins(); after != rowsBefore {
		t.Fatalf("the refused export rewrote rows: %s -> %s", rowsBefore, after)
	}
	st := state()
	if st.checksum != stBefore.checksum || st.instance != w1.Instance || st.version != w1.Version || !st.lastWrite.Equal(stBefore.lastWrite) {
		t.Fatalf("the refused export changed the state: %+v -> %+v", stBefore, st)
	}
	if st.contInstance != w2.Instance || st.contVersion != w2.Version || st.contendedAt == nil {
		t.Fatalf("the state's contender mark after the refusal: %+v, want %+v", st, w2)
	}
	// A confirmation by the second is refused the same way.
	err = s2.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: stBefore.checksum, At: time.Now().UTC(),
		Writer: w2, ConflictWindow: window})
	if !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the second agent's confirmation: %v, want ErrWriterConflict", err)
	}
	if st := state(); st.instance != w1.Instance || !st.lastWrite.Equal(stBefore.lastWrite) {
		t.Fatalf("the refused confirmation changed the state: %+v", st)
	}

	// The holder's confirmation and export go through, and report the contender.
	at := time.Now().UTC()
	err = s1.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: first.lastChecksum, At: at, Writer: w1, ConflictWindow: window})
	var contended *sink.ContendedError
	if !errors.As(err, &contended) || contended.Contender != w2 || errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the holder's confirmation: %v, want a *sink.ContendedError naming %s", err, w2.Instance)
	}
	if st := state(); !st.lastWrite.Equal(at.Truncate(time.Microsecond)) {
		t.Fatalf("the holder's contended confirmation did not move confirmed_at: %+v, want %s", st, at)
	}
	b = first.batch(sinktest.Deployments("east", "apps", 20, 3))
	b.ConflictWindow = window
	if err := s1.Export(ctx, b); !errors.As(err, &contended) {
		t.Fatalf("the holder's export: %v, want a *sink.ContendedError", err)
	}
	first.accept()
	if st := state(); st.checksum != first.lastChecksum || st.instance != w1.Instance {
		t.Fatalf("the holder's contended export is not in the state: %+v", st)
	}
	if got := stored(t, pool, "east"); len(got) != 20 {
		t.Fatalf("after the holder's contended export the table holds %d rows, want its 20", len(got))
	}
	// Past the window, the contender mark (the refused confirmation's) no longer counts.
	err = s1.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: first.lastChecksum, At: state().contendedAt.Add(window),
		Writer: w1, ConflictWindow: window})
	if err != nil {
		t.Fatalf("the holder's confirmation a window after the contention: %v, want nil", err)
	}

	// The first stops; a window after its last write the second takes over.
	last := state().lastWrite
	b = second.batch(sinktest.Deployments("east", "apps", 5, 2))
	b.ConflictWindow, b.Envelope.ExportedAt = window, last.Add(window)
	if err := s2.Export(ctx, b); err != nil {
		t.Fatalf("the second agent's export a window after the first's last write: %v, want it taken over", err)
	}
	second.accept()
	if st := state(); st.instance != w2.Instance || st.checksum != second.lastChecksum {
		t.Fatalf("after the takeover the state is %+v, want the second's", st)
	}
	if got := stored(t, pool, "east"); len(got) != 5 {
		t.Fatalf("after the takeover the table holds %d rows, want the second's 5", len(got))
	}
	b = first.batch(sinktest.Deployments("east", "apps", 20, 4))
	b.ConflictWindow, b.Envelope.ExportedAt = window, last.Add(window+time.Second)
	if err := s1.Export(ctx, b); !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("the first agent, back after the takeover: %v, want ErrWriterConflict", err)
	}
}
