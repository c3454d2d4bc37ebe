package bigquery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/sink"
)

// The service's documented answers to a write that lost to a concurrent one, as BigQuery words
// them (docs/sinks/bigquery.md, "For a fleet"). The emulator never gives them: the tests inject
// them in its place.
var serviceConflicts = []struct{ reason, message string }{
	{"invalidQuery", "Transaction is aborted due to concurrent update against table test:fleet.rows. Transaction ID: 6a1e3b2c-0000-2f4d-9c1e-f403045e1a2b"},
	{"invalidQuery", "Could not serialize access to table test:fleet.rows_state due to concurrent update"},
	{"invalidQuery", "Resources exceeded during query execution: Too many DML statements outstanding against table test:fleet.rows_state, limit is 20."},
}

// fastBackoff keeps the tests' retries short; the waits' shape is the production one.
var fastBackoff = backoff{base: 5 * time.Millisecond, max: 50 * time.Millisecond}

func TestConflictIsTransient(t *testing.T) {
	for _, c := range serviceConflicts {
		if !isConflict(errors.New(c.message)) {
			t.Errorf("%q is not taken for a conflict", c.message)
		}
	}
	if isConflict(errors.New("Syntax error: Unexpected identifier at [1:1]")) || isConflict(nil) {
		t.Error("an invalid query is taken for a conflict")
	}
	for n := range 40 {
		if w := conflictBackoff.wait(n); w <= 0 || w > conflictBackoff.max {
			t.Fatalf("wait %d is %v, outside (0, %v]", n, w, conflictBackoff.max)
		}
	}
}

// TestConflictingTransactionIsRetried, against the BigQuery emulator (a stand-in) with the
// service's documented conflict errors injected in front of it: an export whose transaction
// loses to another agent's runs it again, on the same staged rows, and holds exactly the
// snapshot; a confirmation whose UPDATE loses is retried too. An invalid query is not retried.
func TestConflictingTransactionIsRetried(t *testing.T) {
	ctx := context.Background()
	for i, c := range serviceConflicts {
		t.Run(c.message[:20], func(t *testing.T) {
			ds := newDataset(t)
			s, rec := newSink(t, ds, "east")
			s.turns.backoff = fastBackoff
			a := &agent{sink: s, cluster: "east", inventory: "apps"}
			if err := a.export(ctx, mkRows("east", 5, 1)); err != nil {
				t.Fatal(err)
			}
			rec.Calls()
			rec.FailWith("query script", 3, http.StatusBadRequest, c.reason, c.message)
			if err := a.export(ctx, mkRows("east", 7, 2)); err != nil {
				t.Fatalf("export after 3 conflicts: %v", err)
			}
			calls := rec.Calls()
			if calls["query script"] != 4 || calls["POST insertAll"] != 1 || calls["POST table"] != 1 {
				t.Fatalf("requests %v, want the rows staged once and 4 attempts of the transaction", calls)
			}
			got := rowsOf(t, ds, "east")
			if len(got) != 7 {
				t.Fatalf("%d rows after the retried export, want 7: %v", len(got), got)
			}
			for _, r := range got {
				if !strings.Contains(r.Attributes, "app:2") {
					t.Fatalf("stale row %+v", r)
				}
			}
			if sum, _, _ := stateOf(t, ds); sum != a.lastChecksum {
				t.Fatalf("state %s, want %s", sum, a.lastChecksum)
			}
			if n := s.turns.conflicts.Load(); n != 3 {
				t.Fatalf("%d conflicts counted, want 3", n)
			}
			if i > 0 {
				return
			}
			// The confirmation is a plain DML job (jobs.insert).
			jobs := "POST /projects/" + server.Project + "/jobs"
			rec.FailWith(jobs, 2, http.StatusBadRequest, c.reason, serviceConflicts[1].message)
			if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.lastChecksum, At: time.Now()}); err != nil {
				t.Fatalf("confirmation after 2 conflicts: %v", err)
			}
			if calls := rec.Calls(); calls[jobs] != 3 {
				t.Fatalf("requests %v, want 3 confirmation jobs", calls)
			}
		})
	}
	t.Run("invalid query", func(t *testing.T) {
		ds := newDataset(t)
		s, rec := newSink(t, ds, "east")
		s.turns.backoff = fastBackoff
		a := &agent{sink: s, cluster: "east", inventory: "apps"}
		rec.FailWith("query script", 1, http.StatusBadRequest, "invalidQuery", "Syntax error: Unexpected keyword at [1:1]")
		err := a.export(ctx, mkRows("east", 3, 1))
		if sink.ClassOf(err) != sink.Terminal || rec.Calls()["query script"] != 1 {
			t.Fatalf("invalid query: %v (%s), want one terminal attempt", err, sink.ClassOf(err))
		}
	})
}

// TestConflictsUntilTheDeadlineAreTransient: a transaction that keeps losing is given up
// before the call's deadline, as a transient error that leaves the rows as they were.
func TestConflictsUntilTheDeadlineAreTransient(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	s, rec := newSink(t, ds, "east")
	a := &agent{sink: s, cluster: "east", inventory: "apps"}
	if err := a.export(ctx, mkRows("east", 4, 1)); err != nil {
		t.Fatal(err)
	}
	before := rowsOf(t, ds, "east")
	s.turns.backoff = backoff{base: 20 * time.Millisecond, max: 100 * time.Millisecond}
	rec.FailWith("query script", 1<<20, http.StatusBadRequest, serviceConflicts[0].reason, serviceConflicts[0].message)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := a.export(cctx, mkRows("east", 6, 2))
	if err == nil || sink.ClassOf(err) != sink.Transient || !isConflict(err) {
		t.Fatalf("export losing every time: %v (%s), want a transient conflict", err, sink.ClassOf(err))
	}
	if after := rowsOf(t, ds, "east"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("rows changed: %v", after)
	}
	rec.Fail("query script", 0, 0, "")
	if err := a.export(ctx, mkRows("east", 6, 2)); err != nil {
		t.Fatal(err)
	}
	if got := uids(t, ds, "east"); len(got) != 6 {
		t.Fatalf("after the conflicts ended: %v", got)
	}
}
