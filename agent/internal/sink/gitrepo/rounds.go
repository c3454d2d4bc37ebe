package gitrepo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// Pushes of many agents to one branch are optimistic: each builds on the tip it fetched and
// the server takes one push per tip, so N agents pushing at once land one commit per round
// and the others go again. What keeps a fleet converging is pacing those rounds:
//
//   - The backoff's unit is the duration of the round that was just lost (fetch, rebuild,
//     push), not a constant: a round against a busy server takes longer, and agents that wait
//     a few rounds' worth, spread at random (full jitter), stop colliding. The spread doubles
//     with each lost round up to 32 rounds' worth, enough to spread 50 agents to about one
//     push per round.
//   - A lost round is one where another agent moved the branch. Rejections that leave the
//     branch where it was (a hook, a protected branch, a server error) are not contention:
//     after maxStuck of them the export fails.
//   - An export goes on while its deadline leaves room for another round, up to maxRounds;
//     then it fails transiently and the delivery worker sends it again later.
const (
	maxRounds = 40
	maxStuck  = 3
	// minUnit is the smallest backoff unit, for rounds that failed at once.
	minUnit = 50 * time.Millisecond
	// maxDoublings caps the spread at 2^5 = 32 units.
	maxDoublings = 5
)

// rounds paces the fetch-rebuild-push rounds of one export.
type rounds struct {
	n      int           // rounds begun
	stuck  int           // rejected rounds after which the branch had not moved
	parent plumbing.Hash // the tip the current round builds on
	began  time.Time
	// rejected is why the last push was refused.
	rejected error
}

// begin starts a round.
func (r *rounds) begin() {
	r.n++
	r.began = time.Now()
}

// on records the tip the round builds on, and fails when rejections no longer come from
// other agents' pushes: the previous round was rejected, and the branch has not moved.
func (r *rounds) on(parent plumbing.Hash) error {
	if r.n > 1 && parent == r.parent {
		r.stuck++
		if r.stuck >= maxStuck {
			// %v: the rejection must not read as errConflict, which would start another round.
			return fmt.Errorf("the push was rejected %d times while the branch did not move: %v", r.stuck, r.rejected)
		}
	}
	r.parent = parent
	return nil
}

// retry waits before the next round after a push rejected with err, or returns why there is
// none.
func (r *rounds) retry(ctx context.Context, err error) error {
	r.rejected = err
	lost := time.Since(r.began)
	if r.n >= maxRounds {
		return fmt.Errorf("still rejected after %d attempts", r.n)
	}
	d := r.delay(lost)
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d+lost {
		return fmt.Errorf("still rejected after %d attempts, and the export's deadline leaves no room for another", r.n)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// delay is the full-jitter wait after the n-th lost round, which took lost.
func (r *rounds) delay(lost time.Duration) time.Duration {
	unit := max(lost, minUnit)
	spread := unit << min(r.n-1, maxDoublings)
	return time.Duration(rand.Int64N(int64(spread)))
}
