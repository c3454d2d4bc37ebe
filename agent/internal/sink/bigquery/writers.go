package bigquery

import (
	"context"
	"fmt"
	"time"

	bq "cloud.google.com/go/bigquery"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// The writer check reads the state row (the query that reads the checksum) and decides before
// any write. BigQuery has no lock to hold across that read and the export's transaction, so two
// agents whose very first exports of an inventory start at the same moment on an empty state
// both proceed; the next export or confirmation of either then finds the other's writer.

// check is the writer check of self writing at now over st (nil: no state).
func (s *Sink) check(st *state, cluster, inventory string, self export.Writer, now time.Time, window time.Duration) sink.WriterCheck {
	c := sink.WriterCheck{Cluster: cluster, Inventory: inventory, Self: self, Now: now, Window: window}
	if st != nil {
		c.Holder, c.HolderLastWrite, c.Contender, c.ContendedAt = st.holder, st.lastWrite, st.contender, st.contendedAt
	}
	return c
}

// takeover logs, and reports, a write over the state of another agent gone for the window.
func (s *Sink) takeover(c sink.WriterCheck) bool {
	if !c.TakesOver() {
		return false
	}
	s.env.Log.Info("taking over the state of another agent that has not written for the conflict window", "cluster", c.Cluster,
		"inventory", c.Inventory, "previous", c.Holder.Instance, "previousVersion", c.Holder.Version, "lastWrite", c.HolderLastWrite)
	return true
}

// markContender records, and nothing else, that the refused writer tried: one UPDATE of the
// state row's contender columns. The checksum, the writer and every row stay.
func (s *Sink) markContender(ctx context.Context, cluster, inventory string, who export.Writer, at time.Time) error {
	q := s.client.Query("UPDATE " + s.ref(s.cfg.table+"_state") + " SET contender_version = CAST(@contender_version AS STRING),\n" +
		"  contender_instance = CAST(@contender_instance AS STRING), contended_at = CAST(@contended_at AS TIMESTAMP)\n" +
		"WHERE cluster = @cluster AND inventory = @inventory")
	q.Parameters = []bq.QueryParameter{{Name: "cluster", Value: cluster}, {Name: "inventory", Value: inventory},
		{Name: "contender_version", Value: who.Version}, {Name: "contender_instance", Value: who.Instance},
		{Name: "contended_at", Value: at.UTC().Truncate(time.Microsecond)}}
	err := s.mutate(ctx, "recording the refused writer", func(ctx context.Context) error {
		_, err := runJob(ctx, q)
		return err
	})
	if err != nil {
		return fmt.Errorf("recording the refused writer in the state: %w", err)
	}
	return nil
}

// checkConfirmation is Confirm's writer check: a refusal (the contender mark written), or the
// contention to report once the confirmation succeeded.
func (s *Sink) checkConfirmation(ctx context.Context, c sink.Confirmation) (refusal, contention error, err error) {
	st, _, err := s.readState(ctx, c.Cluster, c.Inventory)
	if err != nil || st == nil {
		return nil, nil, err
	}
	check := s.check(st, c.Cluster, c.Inventory, c.Writer, c.At, c.ConflictWindow)
	if refusal := check.Refusal(); refusal != nil {
		return refusal, nil, s.markContender(ctx, c.Cluster, c.Inventory, c.Writer, c.At)
	}
	if st.checksum == c.Checksum {
		s.takeover(check)
	}
	return nil, check.Contention(), nil
}
