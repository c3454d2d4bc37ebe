package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// stageTable is the per-transaction staging table; ON COMMIT DROP (and rollback) removes it,
// so pooled connections never carry one over.
const stageTable = "kollect_stage"

var stageColumns = []string{"target", "api_group", "version", "kind", "namespace", "name", "uid", "profile", "profile_generation", "attributes"}

// writer applies one batch inside one transaction.
type writer struct {
	tx                 pgx.Tx
	n                  names
	cluster, inventory string
	log                logr.Logger
	// hist keeps <table>_history when the sink has history: true.
	hist history
	// outcome is the writer conflict to return once the transaction committed: the
	// *sink.WriterConflictError of a refused export (whose contender mark must commit), or
	// the *sink.ContendedError of a successful one.
	outcome error
}

// mode is the path an export takes.
type mode int

const (
	modeUnchanged mode = iota
	modeDiff
	modeFull
)

func (m mode) String() string {
	return [...]string{"unchanged", "diff", "full"}[m]
}

// decide picks the path from the stored checksum (empty when the state row is missing).
func decide(stored string, found bool, b *sink.Batch) mode {
	switch {
	case found && stored == b.Envelope.Checksum && !b.Resync:
		return modeUnchanged
	case found && stored == b.PreviousChecksum && !b.Diff.Full && !b.Resync:
		return modeDiff
	default:
		return modeFull
	}
}

// lock serialises exports, confirmations and purges of this (cluster, inventory) across
// agents and pool connections; the next statement's snapshot then sees whatever the previous
// holder committed.
func (w *writer) lock(ctx context.Context) error {
	if err := lockInventory(ctx, w.tx, w.n, w.cluster, w.inventory); err != nil {
		return err
	}
	return nil
}

func (w *writer) export(ctx context.Context, b *sink.Batch) error {
	if err := w.lock(ctx); err != nil {
		return err
	}
	st, err := w.readState(ctx)
	if err != nil {
		return err
	}
	at := b.Envelope.ExportedAt
	if at.IsZero() {
		at = time.Now()
	}
	check := w.check(st, b.Envelope.Writer, at, b.ConflictWindow)
	if refusal := check.Refusal(); refusal != nil {
		w.outcome = refusal
		return w.markContender(ctx, b.Envelope.Writer, at)
	}
	takeover := check.TakesOver()
	if takeover {
		w.log.Info("taking over the state of another agent that has not written for the conflict window", "cluster", w.cluster,
			"inventory", w.inventory, "previous", st.holder.Instance, "previousVersion", st.holder.Version, "lastWrite", st.lastWrite)
	}
	w.outcome = check.Contention()
	if err := w.seedHistory(ctx); err != nil {
		return err
	}
	stored, found, storedCov := st.checksum, st.found, st.coverage
	cov := batchCoverage(&b.Envelope)
	covChanged := !slices.Equal(storedCov, cov)
	m := decide(stored, found, b)
	switch m {
	case modeUnchanged:
		if !covChanged {
			return nil
		}
		// Only the coverage changed (a target turned forbidden, its rows kept): no row is
		// written, below.
	case modeDiff:
		if err := w.upsert(ctx, b.Diff.Upserts()); err != nil {
			return err
		}
		if err := w.deleteKeys(ctx, b.Diff.Deleted); err != nil {
			return err
		}
	case modeFull:
		empty, direct, err := w.inventoryEmpty(ctx)
		if err != nil {
			return err
		}
		if empty && direct {
			// First load: nothing to merge with or delete, so COPY straight into the table
			// and skip the staging round trip (about twice as fast for big inventories).
			if err := w.load(ctx, b.Envelope.Rows); err != nil {
				return err
			}
			// The rows' first versions (and the close of any version left open).
			if w.hist.on {
				if err := w.syncHistory(ctx); err != nil {
					return err
				}
			}
			break
		}
		if err := w.upsert(ctx, b.Envelope.Rows); err != nil {
			return err
		}
		if err := w.deleteStale(ctx, len(b.Envelope.Rows) > 0); err != nil {
			return err
		}
	}
	if covChanged {
		if err := w.saveCoverage(ctx, cov); err != nil {
			return err
		}
	}
	if found && stored == b.Envelope.Checksum {
		if covChanged || takeover {
			// takeover: the rows are the same (two empty inventories), but the writer is not.
			return w.touchState(ctx, &b.Envelope, export.Complete(cov))
		}
		return nil // a resync that found nothing to repair: the state is already right
	}
	return w.saveState(ctx, &b.Envelope)
}

// lockInventory takes the transaction-scoped advisory lock of one (cluster, inventory) of the
// sink's table, which every export and purge of it holds.
func lockInventory(ctx context.Context, tx pgx.Tx, n names, cluster, inventory string) error {
	key := n.schema + "." + n.table + "/" + cluster + "/" + inventory
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key); err != nil {
		return fmt.Errorf("locking %s/%s: %w", cluster, inventory, err)
	}
	return nil
}

// upsert stages rows with COPY and merges them: new keys are inserted, existing keys are
// rewritten only when some column differs, so equal rows keep their updated_at and cost no
// row version.
func (w *writer) upsert(ctx context.Context, rows []export.Row) error {
	if len(rows) == 0 {
		return nil
	}
	if _, err := w.tx.Exec(ctx, `CREATE TEMP TABLE `+stageTable+` (
    target text, api_group text, version text, kind text, namespace text, name text, uid text,
    profile text, profile_generation bigint, attributes jsonb
) ON COMMIT DROP`); err != nil {
		return fmt.Errorf("creating the staging table: %w", err)
	}
	n, err := w.tx.CopyFrom(ctx, pgx.Identifier{stageTable}, stageColumns, &rowSource{rows: rows, i: -1})
	if err != nil {
		return fmt.Errorf("copying %d rows: %w", len(rows), err)
	}
	if int(n) != len(rows) {
		return fmt.Errorf("copied %d of %d rows", n, len(rows))
	}
	q := `INSERT INTO ` + w.n.Rows() + ` AS r
    (cluster, inventory, target, api_group, version, kind, namespace, name, uid, profile, profile_generation, attributes,
     first_seen, updated_at)
SELECT $1, $2, target, api_group, version, kind, namespace, name, uid, profile, profile_generation, attributes, now(), now()
  FROM ` + stageTable + `
ON CONFLICT (cluster, inventory, target, uid) DO UPDATE
   SET api_group = EXCLUDED.api_group, version = EXCLUDED.version, kind = EXCLUDED.kind,
       namespace = EXCLUDED.namespace, name = EXCLUDED.name, profile = EXCLUDED.profile,
       profile_generation = EXCLUDED.profile_generation, attributes = EXCLUDED.attributes,
       updated_at = EXCLUDED.updated_at
 WHERE (r.api_group, r.version, r.kind, r.namespace, r.name, r.profile, r.profile_generation, r.attributes)
       IS DISTINCT FROM
       (EXCLUDED.api_group, EXCLUDED.version, EXCLUDED.kind, EXCLUDED.namespace, EXCLUDED.name, EXCLUDED.profile,
        EXCLUDED.profile_generation, EXCLUDED.attributes)`
	args := []any{w.cluster, w.inventory}
	if w.hist.on {
		// RETURNING lists only the rows inserted or rewritten: equal rows get no version.
		at, err := w.historyTime(ctx)
		if err != nil {
			return err
		}
		q = versioned(w.n, q+` RETURNING `+historyColumns, "$3")
		args = append(args, at)
	}
	if _, err := w.tx.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("upserting %d rows: %w", len(rows), err)
	}
	return nil
}

// inventoryEmpty reports whether the table holds no row of this cluster and inventory (the
// advisory lock keeps it so until the transaction ends), and whether a first load may COPY
// straight into the table: not under row-level security (kollect sinks postgres-rls), which
// PostgreSQL refuses COPY FROM for, so such a load stages and inserts like any reconcile.
func (w *writer) inventoryEmpty(ctx context.Context) (empty, direct bool, err error) {
	err = w.tx.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+w.n.Rows()+" WHERE cluster = $1 AND inventory = $2), NOT row_security_active($3::text::regclass)",
		w.cluster, w.inventory, w.n.Rows()).Scan(&empty, &direct)
	if err != nil {
		return false, false, fmt.Errorf("looking for existing rows: %w", err)
	}
	return empty, direct, nil
}

// load copies rows directly into the rows table.
func (w *writer) load(ctx context.Context, rows []export.Row) error {
	if len(rows) == 0 {
		return nil
	}
	cols := append([]string{"cluster", "inventory"}, stageColumns...)
	n, err := w.tx.CopyFrom(ctx, pgx.Identifier{w.n.schema, w.n.table}, cols,
		&rowSource{rows: rows, i: -1, prefix: []any{w.cluster, w.inventory}})
	if err != nil {
		return fmt.Errorf("copying %d rows: %w", len(rows), err)
	}
	if int(n) != len(rows) {
		return fmt.Errorf("copied %d of %d rows", n, len(rows))
	}
	return nil
}

// deleteKeys removes the diff's deleted keys of this cluster and inventory.
func (w *writer) deleteKeys(ctx context.Context, rows []export.Row) error {
	if len(rows) == 0 {
		return nil
	}
	targets, uids := make([]string, len(rows)), make([]string, len(rows))
	for i := range rows {
		targets[i], uids[i] = rows[i].Target, rows[i].UID
	}
	q := `DELETE FROM ` + w.n.Rows() + ` r
 USING unnest($3::text[], $4::text[]) AS d(target, uid)
 WHERE r.cluster = $1 AND r.inventory = $2 AND r.target = d.target AND r.uid = d.uid`
	args := []any{w.cluster, w.inventory, targets, uids}
	if w.hist.on {
		at, err := w.historyTime(ctx)
		if err != nil {
			return err
		}
		q = closing(w.n, q+` RETURNING r.target, r.uid`, "$1", "$2", "$5")
		args = append(args, at)
	}
	if _, err := w.tx.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("deleting %d rows: %w", len(rows), err)
	}
	return nil
}

// deleteStale removes the rows of this cluster and inventory that the staged snapshot does not
// hold (all of them when the snapshot is empty and nothing was staged).
func (w *writer) deleteStale(ctx context.Context, staged bool) error {
	q := `DELETE FROM ` + w.n.Rows() + ` r WHERE r.cluster = $1 AND r.inventory = $2`
	if staged {
		q += ` AND NOT EXISTS (SELECT 1 FROM ` + stageTable + ` s WHERE s.target = r.target AND s.uid = r.uid)`
	}
	args := []any{w.cluster, w.inventory}
	if w.hist.on {
		at, err := w.historyTime(ctx)
		if err != nil {
			return err
		}
		q = closing(w.n, q+` RETURNING r.target, r.uid`, "$1", "$2", "$3")
		args = append(args, at)
	}
	if _, err := w.tx.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("deleting stale rows: %w", err)
	}
	return nil
}

func (w *writer) saveState(ctx context.Context, env *export.Envelope) error {
	at := env.ExportedAt
	if at.IsZero() {
		at = time.Now()
	}
	_, err := w.tx.Exec(ctx, `INSERT INTO `+w.n.State()+` (cluster, inventory, checksum, item_count, exported_at, confirmed_at,
    agent_version, agent_instance)
VALUES ($1, $2, $3, $4, $5, $5, $6, $7)
ON CONFLICT (cluster, inventory) DO UPDATE
   SET checksum = EXCLUDED.checksum, item_count = EXCLUDED.item_count, exported_at = EXCLUDED.exported_at,
       confirmed_at = CASE WHEN $8::boolean THEN EXCLUDED.confirmed_at ELSE `+w.n.State()+`.confirmed_at END,
       agent_version = EXCLUDED.agent_version, agent_instance = EXCLUDED.agent_instance`,
		w.cluster, w.inventory, env.Checksum, int64(len(env.Rows)), at, env.Writer.Version, env.Writer.Instance,
		// Kept rows of a target the agent cannot see are not confirmed current: confirmed_at
		// stays, as the delivery worker's confirmation does.
		export.Complete(env.Coverage))
	if err != nil {
		return fmt.Errorf("saving state: %w", err)
	}
	return nil
}

// rowSource feeds rows to COPY without building an intermediate [][]any.
type rowSource struct {
	rows []export.Row
	i    int
	// prefix holds constant leading values (cluster, inventory) for a direct load.
	prefix []any
	vals   []any
}

func (s *rowSource) Next() bool {
	s.i++
	return s.i < len(s.rows)
}

func (s *rowSource) Values() ([]any, error) {
	r := &s.rows[s.i]
	attrs := []byte(r.Attributes)
	if len(attrs) == 0 {
		attrs = []byte("{}")
	}
	// Pointers, not values: a string or an integer in an interface is a copy on the heap, and
	// a first load copies every row of the inventory (pgx encodes each row before the next).
	o := r.Origin
	s.vals = append(append(s.vals[:0], s.prefix...), &o.Target, &o.Group, &o.Version, &o.Kind, &r.Namespace, &r.Name, &r.UID,
		&o.Profile, &o.ProfileGeneration, attrs)
	return s.vals, nil
}

func (s *rowSource) Err() error { return nil }
