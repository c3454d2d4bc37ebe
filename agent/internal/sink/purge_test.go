package sink

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestHoldingRetiredByItsLatestWrite: a holding is retired by the later of its confirmation
// and its change (an incomplete export changes without confirming), one without any state
// time is retired, and a zero cutoff retires everything (no check).
func TestHoldingRetiredByItsLatestWrite(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cutoff := now.Add(-time.Hour)
	quiet := Holding{Inventory: "quiet", ChangedAt: now.Add(-5 * time.Hour), ConfirmedAt: now.Add(-10 * time.Minute)}
	changing := Holding{Inventory: "changing", ChangedAt: now.Add(-10 * time.Minute), ConfirmedAt: now.Add(-5 * time.Hour)}
	gone := Holding{Inventory: "gone", ChangedAt: now.Add(-5 * time.Hour), ConfirmedAt: now.Add(-2 * time.Hour)}
	stateless := Holding{Inventory: "stateless", Rows: 3}
	if quiet.Retired(cutoff) || changing.Retired(cutoff) || !gone.Retired(cutoff) || !stateless.Retired(cutoff) {
		t.Fatalf("retired at %v: quiet %v, changing %v, gone %v, stateless %v", cutoff,
			quiet.Retired(cutoff), changing.Retired(cutoff), gone.Retired(cutoff), stateless.Retired(cutoff))
	}
	late := NotRetired([]Holding{quiet, changing, gone, stateless}, cutoff)
	if len(late) != 2 || late[0].Inventory != "quiet" || late[1].Inventory != "changing" {
		t.Fatalf("not retired: %+v", late)
	}
	if late := NotRetired([]Holding{quiet}, time.Time{}); late != nil {
		t.Fatalf("a zero cutoff checks nothing, got %+v", late)
	}
	err := NotRetiredError("east", late, cutoff)
	if !errors.Is(err, ErrNotRetired) || !strings.Contains(err.Error(), "cluster east") ||
		!strings.Contains(err.Error(), "inventory changing at 2026-11-30T11:50:00Z") {
		t.Fatalf("error %v", err)
	}
}
