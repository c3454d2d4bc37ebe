package bigquery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	bq "cloud.google.com/go/bigquery"
	"google.golang.org/api/iterator"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

var _ sink.Confirmer = (*Sink)(nil)

// confirmSQL is the confirmation: one UPDATE of the state row, bound to its checksum, which
// also names the confirming agent as the row's writer.
func (s *Sink) confirmSQL() string {
	return "UPDATE " + s.ref(s.cfg.table+"_state") + " SET confirmed_at = CAST(@confirmed_at AS TIMESTAMP),\n" +
		"  agent_version = CAST(@agent_version AS STRING), agent_instance = CAST(@agent_instance AS STRING)\n" +
		"WHERE cluster = @cluster AND inventory = @inventory AND checksum = @checksum"
}

// Confirm moves the state row's confirmed_at and names the confirming agent in its
// agent_version and agent_instance, and nothing else, when the row still holds the
// confirmed checksum: one DML UPDATE, no row written. A state row with another checksum, or
// none, is sink.ErrNotHeld: the agent exports again in full. BigQuery reports the rows the
// UPDATE matched; when it reports none (the emulator the tests run against reports no DML
// statistics at all), the state row is read back to tell. The state row is read first for the
// writer check: another agent's state refuses the confirmation, as it refuses an export.
func (s *Sink) Confirm(ctx context.Context, c sink.Confirmation) error {
	if err := s.ensureProvisioned(ctx); err != nil {
		return err
	}
	refusal, contention, err := s.checkConfirmation(ctx, c)
	switch {
	case err != nil:
		return classify(fmt.Errorf("bigquery sink %s: confirming %s/%s: %w", s.dest, c.Cluster, c.Inventory, err))
	case refusal != nil:
		return fmt.Errorf("bigquery sink %s: %w", s.dest, refusal)
	}
	reported := func() error {
		if contention != nil {
			return fmt.Errorf("bigquery sink %s: %w", s.dest, contention)
		}
		return nil
	}
	at := c.At.UTC().Truncate(time.Microsecond)
	q := s.client.Query(s.confirmSQL())
	q.Parameters = []bq.QueryParameter{{Name: "cluster", Value: c.Cluster}, {Name: "inventory", Value: c.Inventory},
		{Name: "checksum", Value: c.Checksum}, {Name: "confirmed_at", Value: at},
		{Name: "agent_version", Value: c.Writer.Version}, {Name: "agent_instance", Value: c.Writer.Instance}}
	fail := func(err error) error {
		if isStatus(err, http.StatusNotFound) {
			s.mu.Lock()
			s.provisioned = false
			s.mu.Unlock()
			return sink.TransientError(fmt.Errorf("bigquery sink %s: confirming %s/%s: %w", s.dest, c.Cluster, c.Inventory, err))
		}
		return classify(fmt.Errorf("bigquery sink %s: confirming %s/%s: %w", s.dest, c.Cluster, c.Inventory, err))
	}
	var status *bq.JobStatus
	err = s.mutate(ctx, "confirming", func(ctx context.Context) error {
		var err error
		status, err = runJob(ctx, q)
		return err
	})
	if err != nil {
		return fail(err)
	}
	if qs, ok := status.Statistics.Details.(*bq.QueryStatistics); ok && qs.NumDMLAffectedRows > 0 {
		return reported()
	}
	held, confirmed, err := s.readConfirmation(ctx, c.Cluster, c.Inventory)
	if err != nil {
		return fail(err)
	}
	if held == c.Checksum && confirmed.Equal(at) {
		return reported() // the UPDATE matched; no statistics said so
	}
	names := "none"
	if held != "" {
		names = export.ShortChecksum(held)
	}
	return fmt.Errorf("bigquery sink %s: the state of %s/%s holds %s, not checksum %s: %w", s.dest, c.Cluster, c.Inventory,
		names, export.ShortChecksum(c.Checksum), sink.ErrNotHeld)
}

// readConfirmation reads the state row's checksum and confirmed_at; "" without a row.
func (s *Sink) readConfirmation(ctx context.Context, cluster, inventory string) (string, time.Time, error) {
	q := s.client.Query("SELECT checksum, confirmed_at FROM " + s.ref(s.cfg.table+"_state") +
		" WHERE cluster = @cluster AND inventory = @inventory")
	q.Parameters = []bq.QueryParameter{{Name: "cluster", Value: cluster}, {Name: "inventory", Value: inventory}}
	it, err := q.Read(ctx)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("reading state: %w", err)
	}
	var row []bq.Value
	switch err := it.Next(&row); {
	case errors.Is(err, iterator.Done):
		return "", time.Time{}, nil
	case err != nil:
		return "", time.Time{}, fmt.Errorf("reading state: %w", err)
	}
	sum, _ := row[0].(string)
	at, _ := row[1].(time.Time)
	return sum, at, nil
}
