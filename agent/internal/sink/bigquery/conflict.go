package bigquery

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
)

// A fleet shares one table, and BigQuery limits what writes it at once (docs/sinks/bigquery.md,
// "For a fleet"):
//
//   - A multi-statement transaction that updates or deletes rows of a table excludes every
//     other transaction and mutating DML statement on that table while it runs; the service
//     cancels a conflicting transaction ("Transaction is aborted due to concurrent update
//     against table …") rather than queueing it.
//   - Mutating DML statements outside a transaction (UPDATE, DELETE, MERGE: the confirmation,
//     the contender mark) run at most 2 at a time per table, up to 20 more wait, and further
//     ones fail ("Too many DML statements outstanding against table …"); two that change the
//     same partition conflict, and after 3 retries of its own the service fails one ("Could
//     not serialize access to table … due to concurrent update").
//
// The export keeps its transaction, so readers never see half an export, and lives with these
// limits: the staging (streaming inserts, which no DML limit counts) runs in parallel across
// the fleet, while the transactions that apply it take turns. Each sink runs its own mutating
// jobs one at a time (an agent never collides with itself), and a job that lost to another
// agent's runs again after a jittered, growing wait, within the call's deadline: it is
// idempotent (see script) and its staged rows stay in place. A conflict the deadline leaves
// unresolved is a transient error, which the delivery worker retries later.

// conflictMessages are the service's documented messages of a transaction or statement that
// lost to a concurrent one, lower case. They come as HTTP 400 errors or failed jobs, which
// classify would otherwise take for an invalid query: terminal.
var conflictMessages = []string{
	"transaction is aborted due to concurrent update",
	"could not serialize access to table",
	"too many dml statements outstanding against table",
}

// isConflict reports an error of losing to concurrent writers of the table: a job error or
// an API error, whatever its code, whose message is one of the service's.
func isConflict(err error) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	for _, m := range conflictMessages {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// backoff shapes the waits between attempts of a job that lost to a concurrent one: full
// jitter over a ceiling that doubles from base to max, so that agents which collided spread
// out instead of colliding again.
type backoff struct {
	base, max time.Duration
}

// conflictBackoff is the backoff of exports: a transaction of the service takes seconds, so
// the first wait is about one transaction long, and the ceiling stays well inside the
// default export timeout (2m).
var conflictBackoff = backoff{base: 2 * time.Second, max: 30 * time.Second}

// wait is the pause before attempt n+1 (n ≥ 0 attempts failed).
func (b backoff) wait(n int) time.Duration {
	ceiling := b.max
	if n < 30 && b.base<<n < b.max {
		ceiling = b.base << n
	}
	if ceiling <= 0 {
		return 0
	}
	return rand.N(ceiling) + 1
}

// turns serialises the mutating jobs of one sink and counts their conflicts.
type turns struct {
	turn      chan struct{} // holds a token while a job of this sink runs
	backoff   backoff
	conflicts atomic.Int64
}

func newTurns() *turns {
	return &turns{turn: make(chan struct{}, 1), backoff: conflictBackoff}
}

// mutate runs a mutating job (transaction or DML statement) when no other job of this sink
// runs, and again after each conflict with another agent's job, until it succeeds, fails
// otherwise, or ctx leaves no time for the next wait. run must be idempotent.
func (s *Sink) mutate(ctx context.Context, what string, run func(context.Context) error) error {
	m := s.turns
	select {
	case m.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for this agent's other write to the table: %w", what, ctx.Err())
	}
	defer func() { <-m.turn }()
	for n := 0; ; n++ {
		err := run(ctx)
		if !isConflict(err) {
			return err
		}
		m.conflicts.Add(1)
		wait := m.backoff.wait(n)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return fmt.Errorf("%s lost to concurrent writers of the table %d times, the last: %w", what, n+1, err)
		}
		s.env.Log.V(1).Info("a write lost to another agent's write to the table; retrying", "what", what,
			"attempt", n+1, "wait", wait, "error", err.Error())
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("%s lost to concurrent writers of the table %d times: %w", what, n+1, err)
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
