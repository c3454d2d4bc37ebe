package sink

import (
	"errors"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
)

// TestWriterCheck: another instance that wrote within the window refuses the write, with a
// message naming both instances, the cluster and inventory and what to do; one older than the
// window is taken over; a contender mark within the window is reported to the holder only.
func TestWriterCheck(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	a := export.Writer{Version: "v1", Instance: "kollect@aaaa"}
	b := export.Writer{Version: "v2", Instance: "kollect@bbbb"}
	c := WriterCheck{Cluster: "prod", Inventory: "apps", Self: b, Now: now, Window: time.Minute, Holder: a, HolderLastWrite: now.Add(-59 * time.Second)}
	err := c.Refusal()
	var wc *WriterConflictError
	if !errors.Is(err, ErrWriterConflict) || !errors.As(err, &wc) || wc.Holder != a || ClassOf(err) != Terminal {
		t.Fatalf("a holder that wrote 59s ago with a 1m window: %v, want a terminal *WriterConflictError naming it", err)
	}
	for _, want := range []string{"kollect@aaaa", "kollect@bbbb", "prod/apps", "--cluster-name prod", "its own name", "1m0s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if c.TakesOver() {
		t.Error("a refused write takes over")
	}
	c.HolderLastWrite = now.Add(-time.Minute)
	if err := c.Refusal(); err != nil || !c.TakesOver() {
		t.Fatalf("a holder silent for the window: %v, takes over %t; want it taken over", err, c.TakesOver())
	}
	c.Holder, c.HolderLastWrite = b, now
	if err := c.Refusal(); err != nil || c.TakesOver() {
		t.Fatalf("our own state: %v, takes over %t", err, c.TakesOver())
	}
	c.Holder, c.Self = a, export.Writer{}
	if err := c.Refusal(); err != nil {
		t.Fatalf("a writer without an instance: %v, want no conflict", err)
	}

	h := WriterCheck{Cluster: "prod", Inventory: "apps", Self: a, Now: now, Holder: a, Contender: b, ContendedAt: now.Add(-9 * time.Minute)}
	err = h.Contention()
	var ce *ContendedError
	if !errors.Is(err, ErrContended) || !errors.As(err, &ce) || ce.Contender != b || errors.Is(err, ErrWriterConflict) {
		t.Fatalf("a contender 9m ago, default window: %v, want a *ContendedError naming it", err)
	}
	if !strings.Contains(err.Error(), "kollect@bbbb") || !strings.Contains(err.Error(), "--cluster-name prod") {
		t.Errorf("the contention %q does not name the contender and the cluster name", err)
	}
	h.ContendedAt = now.Add(-DefaultConflictWindow)
	if err := h.Contention(); err != nil {
		t.Fatalf("a contender mark older than the window: %v, want none", err)
	}
	h.Contender, h.ContendedAt = a, now
	if err := h.Contention(); err != nil {
		t.Fatalf("our own contender mark: %v, want none", err)
	}
	if ConflictWindow(0) != DefaultConflictWindow || ConflictWindow(10*time.Second) != 20*time.Second {
		t.Fatal("ConflictWindow is not two confirm intervals, 10m without")
	}
}
