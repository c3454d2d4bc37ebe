package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestWaitSettledWantsAQuietPeriod: the second start-up release waits until the initial load
// has been over for a while (a settled moment between two exports is not enough), gives up
// waiting at its limit, and does not release once the agent stops.
func TestWaitSettledWantsAQuietPeriod(t *testing.T) {
	var calls atomic.Int32
	// Settled, then busy again once, then settled for good.
	flapping := func() bool {
		n := calls.Add(1)
		return n < 3 || n > 5
	}
	start := time.Now()
	if !waitSettled(context.Background(), flapping, 50*time.Millisecond, time.Minute) {
		t.Fatal("waitSettled gave up")
	}
	if calls.Load() < 8 {
		t.Fatalf("released after %d polls (%s): the settled moment before the busy one counted", calls.Load(), time.Since(start))
	}
	never := func() bool { return false }
	if !waitSettled(context.Background(), never, 50*time.Millisecond, 100*time.Millisecond) {
		t.Fatal("waitSettled did not release at its limit")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if waitSettled(ctx, never, 50*time.Millisecond, time.Minute) {
		t.Fatal("waitSettled released after the agent stopped")
	}
}
