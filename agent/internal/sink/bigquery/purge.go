package bigquery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	bq "cloud.google.com/go/bigquery"
	"google.golang.org/api/iterator"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

var _ sink.Purger = (*Sink)(nil)

// OpenProject opens a handle onto the sink tables <table>, _state and _coverage of dataset in
// project, for an operator's command (kollect sinks purge): the operator's default
// credentials, or none with an endpoint (an emulator), and nothing is provisioned. Its jobs
// name no location, so BigQuery runs them where the dataset is.
func OpenProject(ctx context.Context, project, dataset, table, endpoint string) (*Sink, error) {
	s, err := open(ctx, &v1alpha1.BigQuerySinkConfig{Project: project, Dataset: dataset, Table: table, Endpoint: endpoint},
		sink.Env{Namespace: project, Name: dataset})
	if err != nil {
		return nil, err
	}
	s.client.Location = ""
	return s, nil
}

// purgeScope is the WHERE clause of a cluster's rows in every table, of one inventory unless
// inventory is "", and its parameters.
func purgeScope(cluster, inventory string) (string, []bq.QueryParameter) {
	where := " WHERE cluster = @cluster"
	params := []bq.QueryParameter{{Name: "cluster", Value: cluster}}
	if inventory != "" {
		where += " AND inventory = @inventory"
		params = append(params, bq.QueryParameter{Name: "inventory", Value: inventory})
	}
	return where, params
}

// readAll runs a query and returns its rows.
func (s *Sink) readAll(ctx context.Context, sql string, params []bq.QueryParameter) ([][]bq.Value, error) {
	q := s.client.Query(sql)
	q.Parameters = params
	it, err := q.Read(ctx)
	if err != nil {
		return nil, err
	}
	var out [][]bq.Value
	for {
		var row []bq.Value
		switch err := it.Next(&row); {
		case errors.Is(err, iterator.Done):
			return out, nil
		case err != nil:
			return nil, err
		}
		out = append(out, row)
	}
}

// Holdings reports what the tables hold of the cluster: three queries (a count per inventory
// of rows and of coverage entries, and the state rows), no write.
func (s *Sink) Holdings(ctx context.Context, cluster, inventory string) ([]sink.Holding, error) {
	if cluster == "" {
		return nil, sink.Terminalf("bigquery sink %s: holdings of no cluster", s.dest)
	}
	where, params := purgeScope(cluster, inventory)
	set := sink.HoldingSet{}
	for _, t := range []struct {
		table string
		add   func(h *sink.Holding, n int)
	}{
		{s.cfg.table, func(h *sink.Holding, n int) { h.Rows += n }},
		{s.cfg.table + "_coverage", func(h *sink.Holding, n int) { h.CoverageEntries += n }},
	} {
		rows, err := s.readAll(ctx, "SELECT inventory, COUNT(*) FROM "+s.ref(t.table)+where+" GROUP BY inventory", params)
		if err != nil {
			return nil, classify(fmt.Errorf("bigquery sink %s: counting %s: %w", s.dest, t.table, err))
		}
		for _, r := range rows {
			inv, _ := r[0].(string)
			n, _ := r[1].(int64)
			t.add(set.Of(inv), int(n))
		}
	}
	rows, err := s.readAll(ctx, "SELECT inventory, exported_at, confirmed_at, agent_version, agent_instance FROM "+
		s.ref(s.cfg.table+"_state")+where, params)
	if err != nil {
		return nil, classify(fmt.Errorf("bigquery sink %s: reading %s_state: %w", s.dest, s.cfg.table, err))
	}
	for _, r := range rows {
		inv, _ := r[0].(string)
		h := set.Of(inv)
		h.StateRecords++
		// Without a unique key a state may have several rows: the latest times count.
		if t, ok := r[1].(time.Time); ok && t.After(h.ChangedAt) {
			h.ChangedAt = t.UTC()
		}
		if t, ok := r[2].(time.Time); ok && t.After(h.ConfirmedAt) {
			h.ConfirmedAt = t.UTC()
		}
		version, _ := r[3].(string)
		instance, _ := r[4].(string)
		h.Writer = export.Writer{Version: version, Instance: instance}
	}
	return set.List(), nil
}

// purgeSQL is the purge's transaction: the rows, the coverage entries and last the state rows
// of the inventories, each DELETE bounded by the cluster. With guard, each also spares the
// inventories whose state was written at or after @cutoff, as the transaction's snapshot
// holds it: an agent that confirmed since Holdings read the state keeps everything.
func (s *Sink) purgeSQL(inventories []string, guard bool) (string, []bq.QueryParameter) {
	names := make([]string, len(inventories))
	var params []bq.QueryParameter
	for i, inv := range inventories {
		names[i] = fmt.Sprintf("@inv_%d", i)
		params = append(params, bq.QueryParameter{Name: names[i][1:], Value: inv})
	}
	where := " WHERE cluster = @cluster AND inventory IN (" + strings.Join(names, ", ") + ")"
	if guard {
		where += "\n  AND inventory NOT IN (SELECT inventory FROM " + s.ref(s.cfg.table+"_state") +
			" WHERE cluster = @cluster AND GREATEST(exported_at, IFNULL(confirmed_at, exported_at)) >= CAST(@cutoff AS TIMESTAMP))"
	}
	var sb strings.Builder
	sb.WriteString("BEGIN TRANSACTION;\n")
	for _, t := range []string{s.cfg.table, s.cfg.table + "_coverage", s.cfg.table + "_state"} {
		sb.WriteString("DELETE FROM " + s.ref(t) + where + ";\n")
	}
	sb.WriteString("COMMIT TRANSACTION;")
	return sb.String(), params
}

// Purge removes the cluster's rows, coverage entries and state rows in one multi-statement
// transaction: readers see all of them until it commits and none after, and a failure leaves
// them all. BigQuery reports no per-statement counts for a script (nor does the emulator), so
// what was removed is what Holdings read just before; with a cutoff the tables are read again
// after the commit, and an inventory the transaction spared (its agent wrote since) is an
// error wrapping sink.ErrNotRetired, returned with the inventories that were removed.
func (s *Sink) Purge(ctx context.Context, cluster, inventory string, cutoff time.Time) ([]sink.Holding, error) {
	if err := s.ownCluster(cluster); err != nil {
		return nil, err
	}
	held, err := s.Holdings(ctx, cluster, inventory)
	if err != nil {
		return nil, err
	}
	if late := sink.NotRetired(held, cutoff); len(late) > 0 {
		return nil, fmt.Errorf("bigquery sink %s: %w", s.dest, sink.NotRetiredError(cluster, late, cutoff))
	}
	if len(held) == 0 {
		return nil, nil
	}
	inventories := make([]string, len(held))
	for i, h := range held {
		inventories[i] = h.Inventory
	}
	guard := !cutoff.IsZero()
	sql, params := s.purgeSQL(inventories, guard)
	q := s.client.Query(sql)
	q.Parameters = append(params, bq.QueryParameter{Name: "cluster", Value: cluster})
	if guard {
		q.Parameters = append(q.Parameters, bq.QueryParameter{Name: "cutoff", Value: cutoff.UTC().Truncate(time.Microsecond)})
	}
	if err := s.mutate(ctx, "purging", readQuery(q)); err != nil {
		return nil, classify(fmt.Errorf("bigquery sink %s: purging cluster %s: %w", s.dest, cluster, err))
	}
	if !guard {
		return held, nil
	}
	after, err := s.Holdings(ctx, cluster, inventory)
	if err != nil {
		return nil, fmt.Errorf("reading back after the purge: %w", err)
	}
	var spared []sink.Holding
	kept := map[string]bool{}
	for _, h := range after {
		if !h.Retired(cutoff) {
			spared = append(spared, h)
			kept[h.Inventory] = true
		}
	}
	if len(spared) == 0 {
		return held, nil
	}
	var removed []sink.Holding
	for _, h := range held {
		if !kept[h.Inventory] {
			removed = append(removed, h)
		}
	}
	return removed, fmt.Errorf("bigquery sink %s: %w (written while purging)", s.dest, sink.NotRetiredError(cluster, spared, cutoff))
}

// ownCluster refuses a purge of no cluster, and one of another cluster than the agent's own
// by a sink the agent built: an agent only ever deletes its own cluster's data. Operator
// handles (OpenProject) name no cluster and may purge any.
func (s *Sink) ownCluster(cluster string) error {
	switch {
	case cluster == "":
		return sink.Terminalf("bigquery sink %s: purge of no cluster", s.dest)
	case s.env.Cluster != "" && cluster != s.env.Cluster:
		return sink.Terminalf("bigquery sink %s: the sink of cluster %s may not purge cluster %s", s.dest, s.env.Cluster, cluster)
	}
	return nil
}
