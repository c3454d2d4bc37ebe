package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

var _ sink.Purger = (*Sink)(nil)

// OpenURL opens a handle onto the sink tables <schema>.<table>, _state and _coverage of the
// database at url, for an operator's command (kollect query, kollect sinks purge): the
// operator's own connection string and network, so neither Secrets nor the agent's egress
// guard apply, and nothing is migrated. It connects at once so that an unreachable database
// is the command's first error.
func OpenURL(ctx context.Context, url, schema, table string) (*Sink, error) {
	n := names{schema: schema, table: table}
	if err := n.validate(); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set {
		cfg.ConnConfig.RuntimeParams["application_name"] = "kollect"
	}
	// The operator's URL may well point at the fleet's PgBouncer: no named prepared statements
	// (pooling.go), unless the URL chooses pgx's default_query_exec_mode itself.
	if !strings.Contains(url, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = queryExecMode
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	dest := fmt.Sprintf("postgres://%s:%d/%s %s.%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, schema, table)
	return &Sink{names: n, dest: dest, user: cfg.ConnConfig.User, pool: txPool{Pool: pool}, release: pool.Close}, nil
}

// holdingsSelect reads what four sources hold, one result row per (source, inventory) for
// rows, coverage and history versions (a count) and one per state row: the sources are the tables themselves
// for Holdings and DELETE … RETURNING common table expressions for Purge, so both report
// alike.
func holdingsSelect(rows, coverage, history, state, where string) string {
	return `SELECT 'rows', inventory, count(*), NULL::timestamptz, NULL::timestamptz, '', '' FROM ` + rows + where + ` GROUP BY inventory
UNION ALL
SELECT 'history', inventory, count(*), NULL, NULL, '', '' FROM ` + history + where + ` GROUP BY inventory
UNION ALL
SELECT 'coverage', inventory, count(*), NULL, NULL, '', '' FROM ` + coverage + where + ` GROUP BY inventory
UNION ALL
SELECT 'state', inventory, 1, exported_at, confirmed_at, agent_version, agent_instance FROM ` + state + where
}

// collectHoldings reads the result of holdingsSelect.
func collectHoldings(rows pgx.Rows) ([]sink.Holding, error) {
	set := sink.HoldingSet{}
	for rows.Next() {
		var src, inventory, version, instance string
		var n int64
		var changed, confirmed *time.Time
		if err := rows.Scan(&src, &inventory, &n, &changed, &confirmed, &version, &instance); err != nil {
			rows.Close()
			return nil, err
		}
		h := set.Of(inventory)
		switch src {
		case "rows":
			h.Rows += int(n)
		case "coverage":
			h.CoverageEntries += int(n)
		case "history":
			h.Objects += int(n) // the versions of <table>_history (history: true)
		case "state":
			h.StateRecords++
			if changed != nil {
				h.ChangedAt = changed.UTC()
			}
			if confirmed != nil {
				h.ConfirmedAt = confirmed.UTC()
			}
			h.Writer = export.Writer{Version: version, Instance: instance}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return set.List(), nil
}

// noHistory stands in for the history table of a schema an agent older than the history
// migrated, which an operator's command may read.
const noHistory = `(SELECT ''::text AS cluster, ''::text AS inventory WHERE false) AS no_history`

// historySource is the history table, or noHistory when the schema has none.
func historySource(ctx context.Context, q queryer, n names) (string, error) {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", n.History()).Scan(&exists); err != nil {
		return "", fmt.Errorf("looking for the history table: %w", err)
	}
	if !exists {
		return noHistory, nil
	}
	return n.History(), nil
}

// holdings reads what the tables hold of cluster (of inventory, unless "").
func holdings(ctx context.Context, q queryer, n names, cluster, inventory string) ([]sink.Holding, error) {
	hist, err := historySource(ctx, q, n)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, holdingsSelect(n.Rows(), n.Coverage(), hist, n.State(), ` WHERE cluster = $1 AND ($2::text = '' OR inventory = $2)`),
		cluster, inventory)
	if err != nil {
		return nil, err
	}
	return collectHoldings(rows)
}

// Holdings reports what the sink holds of the cluster: one query, no lock, no write, in a
// transaction begun as the sink's others are (its statement timeout; pooling.go).
func (s *Sink) Holdings(ctx context.Context, cluster, inventory string) ([]sink.Holding, error) {
	if cluster == "" {
		return nil, sink.Terminalf("postgres sink %s: holdings of no cluster", s.dest)
	}
	var out []sink.Holding
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = holdings(ctx, tx, s.names, cluster, inventory)
		return err
	})
	if err != nil {
		return nil, s.stepError(fmt.Sprintf("reading what %s holds of cluster %s", s.names.Rows(), cluster), err)
	}
	return out, nil
}

// lockRounds bounds how often Purge looks for inventories that appeared while it took the
// locks of those it had found: only an agent still exporting the cluster makes new ones.
const lockRounds = 3

// Purge removes the cluster's rows, coverage entries, history versions and state rows in one transaction, under
// the advisory lock of every (cluster, inventory) it removes, the lock exports take: an export
// in flight commits before the purge reads or after it commits, never in between, and the
// cutoff is checked on the state as the purge's locks hold it. Readers see the cluster's rows
// until the commit and none after.
func (s *Sink) Purge(ctx context.Context, cluster, inventory string, cutoff time.Time) ([]sink.Holding, error) {
	if err := s.ownCluster(cluster); err != nil {
		return nil, err
	}
	var removed []sink.Holding
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		held, err := lockHoldings(ctx, tx, s.names, cluster, inventory)
		if err != nil {
			return err
		}
		if late := sink.NotRetired(held, cutoff); len(late) > 0 {
			return sink.NotRetiredError(cluster, late, cutoff)
		}
		inventories := make([]string, len(held))
		for i, h := range held {
			inventories[i] = h.Inventory
		}
		// Bounded by the cluster and by the inventories locked, never by the inventory
		// filter alone: an inventory appearing now is not locked, and stays.
		where := ` WHERE cluster = $1 AND inventory = ANY ($2::text[])`
		hist, err := historySource(ctx, tx, s.names)
		if err != nil {
			return err
		}
		delHistory := `DELETE FROM ` + hist + where + ` RETURNING inventory`
		if hist == noHistory {
			delHistory = `SELECT inventory FROM ` + noHistory
		}
		rows, err := tx.Query(ctx, `WITH
  r AS (DELETE FROM `+s.names.Rows()+where+` RETURNING inventory),
  c AS (DELETE FROM `+s.names.Coverage()+where+` RETURNING inventory),
  h AS (`+delHistory+`),
  s AS (DELETE FROM `+s.names.State()+where+` RETURNING inventory, exported_at, confirmed_at, agent_version, agent_instance)
`+holdingsSelect("r", "c", "h", "s", ""), cluster, inventories)
		if err != nil {
			return fmt.Errorf("deleting: %w", err)
		}
		if removed, err = collectHoldings(rows); err != nil {
			return fmt.Errorf("deleting: %w", err)
		}
		return nil
	})
	if errors.Is(err, sink.ErrNotRetired) {
		return nil, fmt.Errorf("postgres sink %s: %w", s.dest, err)
	}
	if err != nil {
		return nil, s.stepError(fmt.Sprintf("purging cluster %s", cluster), err)
	}
	return removed, nil
}

// lockHoldings takes the export lock of every inventory the cluster holds, in inventory order
// (two purges then queue rather than deadlock), and returns the holdings read after the
// locks: what exports that held them committed is included.
func lockHoldings(ctx context.Context, tx pgx.Tx, n names, cluster, inventory string) ([]sink.Holding, error) {
	locked := map[string]bool{}
	for range lockRounds {
		held, err := holdings(ctx, tx, n, cluster, inventory)
		if err != nil {
			return nil, fmt.Errorf("reading what the cluster holds: %w", err)
		}
		fresh := 0
		for _, h := range held {
			if locked[h.Inventory] {
				continue
			}
			if err := lockInventory(ctx, tx, n, cluster, h.Inventory); err != nil {
				return nil, err
			}
			locked[h.Inventory] = true
			fresh++
		}
		if fresh == 0 {
			return held, nil
		}
	}
	return nil, fmt.Errorf("cluster %s gained inventories %d times while they were being locked: an agent is still exporting it", cluster, lockRounds)
}

// ownCluster refuses a purge of no cluster, and one of another cluster than the agent's own
// by a sink the agent built: an agent only ever deletes its own cluster's data. Operator
// handles (OpenURL) name no cluster and may purge any.
func (s *Sink) ownCluster(cluster string) error {
	switch {
	case cluster == "":
		return sink.Terminalf("postgres sink %s: purge of no cluster", s.dest)
	case s.env.Cluster != "" && cluster != s.env.Cluster:
		return sink.Terminalf("postgres sink %s: the sink of cluster %s may not purge cluster %s", s.dest, s.env.Cluster, cluster)
	}
	return nil
}
