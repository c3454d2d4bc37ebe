package delivery

import (
	"context"
	"math/rand/v2"
	"time"

	"kollect.dev/agent/internal/sink"
)

// waitToRetry waits delay, or less when a probe of the sink passes first (see
// Backoff.ProbeInterval); it returns false when ctx ends.
//
// After a terminal error a passing probe ends the wait only when a probe of this wait failed
// before it: then what failed was what the probe checks (the connection, the credentials, the
// privileges), and it was fixed. A probe that passes from the start cannot see what failed (a
// missing bucket, a row the database refuses), and retrying at each of its passes made a
// terminal error a retry every ProbeInterval instead of TerminalDelay: the wait then stops
// probing, and only the delay, Kick or a new worker (a configuration change) ends it.
func (w *Worker) waitToRetry(ctx context.Context, delay time.Duration) bool {
	timer := time.NewTimer(delay)
	defer timer.Stop()
	var probe <-chan time.Time
	// A refused writer is not waiting for the sink to answer, which it does: probing would
	// turn the wait into a retry every ProbeInterval.
	if every := w.backoff.ProbeInterval; every > 0 && delay > every && !w.refused() {
		t := time.NewTicker(every)
		defer t.Stop()
		probe = t.C
	}
	terminal, probeFailed := w.Status().Class == sink.Terminal, false
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-w.kick:
			w.log.Info("retrying the export now, as asked", "sink", w.Name, "instead of in", delay.String())
			return true
		case <-probe:
			pctx, cancel := context.WithTimeout(ctx, min(w.timeout, w.backoff.ProbeInterval))
			err := w.sink.Probe(pctx)
			cancel()
			switch {
			case err != nil:
				probeFailed = true
			case terminal && !probeFailed:
				w.log.V(1).Info("the sink answers its connection test but refused the export: waiting for the terminal delay",
					"sink", w.Name, "in", delay.String())
				probe = nil
			default:
				w.log.Info("sink answers again, retrying the export now", "sink", w.Name, "instead of in", delay.String())
				return true
			}
		}
	}
}

// retryDelay is exponential with full jitter; terminal errors and an open breaker wait longer.
func (w *Worker) retryDelay() time.Duration {
	st := w.Status()
	b := w.backoff
	if st.Conflict != nil && st.Conflict.Refused {
		// The other agent keeps the sink until it stops writing for the window: asking again
		// sooner than it confirms cannot succeed, and every refusal is a state write.
		return w.conflictRetry()
	}
	if st.Class == sink.Terminal {
		return b.TerminalDelay
	}
	d := b.Base << min(st.Failures-1, 20)
	if d > b.Max || d <= 0 {
		d = b.Max
	}
	d = time.Duration(rand.Int64N(int64(d)) + 1)
	if st.Class == sink.CircuitOpen && d < b.BreakerCooldown {
		d = b.BreakerCooldown
	}
	return d
}
