package postgres

import (
	"context"
	"fmt"
	"time"
)

// historyColumns are the columns a version of a row carries besides its interval: the row's
// identity and content, everything an upsert compares.
const historyColumns = "cluster, inventory, target, api_group, version, kind, namespace, name, uid, profile, profile_generation, attributes"

// sameContent compares a row (alias r) with a version (alias h) the way the upsert does.
const sameContent = `(r.api_group, r.version, r.kind, r.namespace, r.name, r.profile, r.profile_generation, r.attributes)
       IS NOT DISTINCT FROM
       (h.api_group, h.version, h.kind, h.namespace, h.name, h.profile, h.profile_generation, h.attributes)`

// history is a writer's part in keeping <table>_history: whether the sink keeps it, whether
// this transaction must first bring it up to the rows (the first write of the inventory since
// the sink was built), and the instant its versions close and open at.
type history struct {
	on, seed bool
	// seeded is set once the seeding ran in this transaction; the sink remembers it after the
	// commit.
	seeded bool
	at     time.Time
}

// historyTime is the instant of this transaction's versions, read once when the first one is
// written (so an unchanged export costs no extra round trip), always after the inventory's
// lock: exports of one inventory are serialised by the lock, so their instants are ordered as
// they commit (now(), the transaction's start, would not be: a transaction may start before
// the one holding the lock and commit after it).
func (w *writer) historyTime(ctx context.Context) (time.Time, error) {
	if w.hist.at.IsZero() {
		if err := w.tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&w.hist.at); err != nil {
			return time.Time{}, fmt.Errorf("reading the history's time: %w", err)
		}
	}
	return w.hist.at, nil
}

// seedHistory brings the history of this (cluster, inventory) up to its rows: it closes the
// open versions no row matches any more (rows changed or deleted while the sink kept no
// history) and opens a version for every row without one (all of them when history was just
// turned on). On a history that is current it writes nothing.
func (w *writer) seedHistory(ctx context.Context) error {
	if !w.hist.on || !w.hist.seed || w.hist.seeded {
		return nil
	}
	return w.syncHistory(ctx)
}

// syncHistory is seedHistory's work, also run after a first load (whose COPY opens no
// version by itself).
func (w *writer) syncHistory(ctx context.Context) error {
	at, err := w.historyTime(ctx)
	if err != nil {
		return err
	}
	if _, err := w.tx.Exec(ctx, `UPDATE `+w.n.History()+` h SET valid_to = GREATEST($3, h.valid_from)
 WHERE h.cluster = $1 AND h.inventory = $2 AND h.valid_to IS NULL
   AND NOT EXISTS (SELECT 1 FROM `+w.n.Rows()+` r
                    WHERE r.cluster = h.cluster AND r.inventory = h.inventory AND r.target = h.target AND r.uid = h.uid
                      AND `+sameContent+`)`, w.cluster, w.inventory, at); err != nil {
		return fmt.Errorf("closing stale history versions: %w", err)
	}
	tag, err := w.tx.Exec(ctx, `INSERT INTO `+w.n.History()+` (`+historyColumns+`, valid_from)
SELECT `+historyColumns+`, $3 FROM `+w.n.Rows()+` r
 WHERE r.cluster = $1 AND r.inventory = $2
   AND NOT EXISTS (SELECT 1 FROM `+w.n.History()+` h
                    WHERE h.cluster = r.cluster AND h.inventory = r.inventory AND h.target = r.target AND h.uid = r.uid
                      AND h.valid_to IS NULL)`, w.cluster, w.inventory, at)
	if err != nil {
		return fmt.Errorf("seeding the history: %w", err)
	}
	if tag.RowsAffected() >= analyzeAfter {
		// Planner statistics of a table that just grew by this much are missing until
		// autovacuum comes by: the next diffs' closing UPDATEs would then scan the whole
		// history once per changed row (seconds per diff at 100k rows, measured).
		if _, err := w.tx.Exec(ctx, "ANALYZE "+w.n.History()); err != nil {
			return fmt.Errorf("analyzing the seeded history: %w", err)
		}
	}
	w.hist.seeded = true
	return nil
}

// analyzeAfter is the seed size from which the seeding transaction analyzes the history.
const analyzeAfter = 10_000

// versioned wraps a data-modifying statement whose RETURNING lists historyColumns (the rows
// it inserted or rewrote) so that the same statement closes their open versions and opens
// the new ones at $at. All three parts see the snapshot from before the statement, so the
// close never touches the versions it opens.
func versioned(n names, modify, at string) string {
	return `WITH changed AS (` + modify + `),
closed AS (UPDATE ` + n.History() + ` h SET valid_to = GREATEST(` + at + `, h.valid_from) FROM changed c
            WHERE h.cluster = c.cluster AND h.inventory = c.inventory AND h.target = c.target AND h.uid = c.uid
              AND h.valid_to IS NULL)
INSERT INTO ` + n.History() + ` (` + historyColumns + `, valid_from) SELECT ` + historyColumns + `, ` + at + ` FROM changed`
}

// closing wraps a DELETE whose RETURNING lists target and uid so that the same statement
// closes the deleted rows' open versions at $at.
func closing(n names, del, cluster, inventory, at string) string {
	return `WITH gone AS (` + del + `)
UPDATE ` + n.History() + ` h SET valid_to = GREATEST(` + at + `, h.valid_from) FROM gone g
 WHERE h.cluster = ` + cluster + ` AND h.inventory = ` + inventory + ` AND h.target = g.target AND h.uid = g.uid
   AND h.valid_to IS NULL`
}
