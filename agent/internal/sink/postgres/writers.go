package postgres

import (
	"context"
	"fmt"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// check is the writer check of self writing at now over the state read under the lock.
func (w *writer) check(st state, self export.Writer, now time.Time, window time.Duration) sink.WriterCheck {
	return sink.WriterCheck{Cluster: w.cluster, Inventory: w.inventory, Self: self, Now: now, Window: window,
		Holder: st.holder, HolderLastWrite: st.lastWrite, Contender: st.contender, ContendedAt: st.contendedAt}
}

// markContender records, and nothing else, that the refused writer tried: the holder's next
// export or confirmation reports it. The checksum, the writer and every row stay.
func (w *writer) markContender(ctx context.Context, who export.Writer, at time.Time) error {
	_, err := w.tx.Exec(ctx, `UPDATE `+w.n.State()+` SET contender_version = $3, contender_instance = $4, contended_at = $5
 WHERE cluster = $1 AND inventory = $2`, w.cluster, w.inventory, who.Version, who.Instance, at)
	if err != nil {
		return fmt.Errorf("recording the refused writer in the state: %w", err)
	}
	return nil
}

// confirm is Confirm's transaction: under the export lock, the writer check, then the move of
// confirmed_at when the state holds the checksum.
func (w *writer) confirm(ctx context.Context, c sink.Confirmation) error {
	if err := w.lock(ctx); err != nil {
		return err
	}
	st, err := w.readState(ctx)
	if err != nil {
		return err
	}
	if !st.found {
		return sink.ErrNotHeld
	}
	check := w.check(st, c.Writer, c.At, c.ConflictWindow)
	if refusal := check.Refusal(); refusal != nil {
		w.outcome = refusal
		return w.markContender(ctx, c.Writer, c.At)
	}
	if st.checksum != c.Checksum {
		return sink.ErrNotHeld
	}
	if check.TakesOver() {
		w.log.Info("taking over the state of another agent that has not written for the conflict window", "cluster", w.cluster,
			"inventory", w.inventory, "previous", st.holder.Instance, "previousVersion", st.holder.Version, "lastWrite", st.lastWrite)
	}
	w.outcome = check.Contention()
	// A quiet inventory after a restart with history newly on is only ever confirmed: its
	// history starts now, not at its next change.
	if err := w.seedHistory(ctx); err != nil {
		return err
	}
	if _, err := w.tx.Exec(ctx, `UPDATE `+w.n.State()+` SET confirmed_at = $3, agent_version = $4, agent_instance = $5
 WHERE cluster = $1 AND inventory = $2`, w.cluster, w.inventory, c.At, c.Writer.Version, c.Writer.Instance); err != nil {
		return fmt.Errorf("confirming: %w", err)
	}
	return nil
}
