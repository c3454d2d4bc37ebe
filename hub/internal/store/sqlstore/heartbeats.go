package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"kollect.dev/hub/internal/store"
)

const heartbeatCols = `at, agent_version, applied_digest, inventories, items, inventories_not_ready, sink_errors, state`

func scanHeartbeat(sc scanner) (store.HeartbeatRecord, error) {
	var (
		r  store.HeartbeatRecord
		at int64
	)
	err := sc.Scan(&at, &r.AgentVersion, &r.AppliedDigest, &r.Inventories, &r.Items, &r.InventoriesNotReady, &r.SinkErrors, &r.State)
	r.At = fromMS(at)
	return r, err
}

// RecordHeartbeat implements store.Store. A fleet's heartbeats are the store's most frequent
// write, so the common one reads the cluster's row and writes it back, and nothing else: the
// row keeps what the heartbeat must compare with (its marks: the newest history record's time
// and values, the applied digest its applied revisions were set from), so the applied
// revisions are written only when the agent's applied configuration changed or its desired
// bundles were rewritten, and the history is read never (planHeartbeat). On PostgreSQL the
// whole heartbeat is one statement (recordHeartbeatPostgres); on SQLite, where a statement
// costs no round trip, it is a transaction of prepared statements.
func (s *Store) RecordHeartbeat(ctx context.Context, h store.Heartbeat) error {
	if s.d.name == postgresDialect.name {
		return s.recordHeartbeatPostgres(ctx, h)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var (
			m            heartbeatMarks
			held         store.CredentialFacts
			exp, prevExp int64
		)
		err := s.txStmt(ctx, tx, qHeartbeatPrevious).QueryRowContext(ctx, h.Cluster).
			Scan(&m.last, &m.historyAt, &m.historyKey, &m.unpruned, &m.appliedChecked,
				&held.Hash, &exp, &held.PreviousHash, &prevExp)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, credentialGone(h.Credential != nil))
		}
		if err != nil {
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, err)
		}
		held.ExpiresAt, held.PreviousExpiresAt = fromMS(exp), fromMS(prevExp)
		// SQLite serialises writers: nothing changes the row between this read and the write.
		if h.Credential != nil && !sameCredential(held, *h.Credential) {
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, store.ErrCredentialChanged)
		}
		p := planHeartbeat(h, m)
		if p.setApplied {
			if err := s.recordApplied(ctx, tx, h); err != nil {
				return err
			}
		}
		if p.addHistory {
			if err := s.recordHistory(ctx, tx, h.Cluster, p); err != nil {
				return err
			}
		}
		res, err := s.txStmt(ctx, tx, qHeartbeatCluster).ExecContext(ctx, ms(h.At), h.AgentVersion, h.KubernetesVersion,
			h.AppliedDigest, h.Status, p.next.historyAt, p.next.historyKey, p.next.unpruned, m.appliedChecked,
			p.next.appliedChecked, h.Presented, h.Cluster)
		if err != nil {
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, store.ErrNotFound)
		}
		return nil
	})
}

// sameCredential compares credential facts as the store keeps them (times in milliseconds).
func sameCredential(a, b store.CredentialFacts) bool {
	return a.Hash == b.Hash && a.PreviousHash == b.PreviousHash &&
		ms(a.ExpiresAt) == ms(b.ExpiresAt) && ms(a.PreviousExpiresAt) == ms(b.PreviousExpiresAt)
}

// credentialGone is the error of a heartbeat whose cluster is gone or revoked: the cached
// credential it was checked against is out of date when there was one (check).
func credentialGone(check bool) error {
	if check {
		return store.ErrCredentialChanged
	}
	return store.ErrNotFound
}

// heartbeatMarks are the columns of a cluster's row a heartbeat compares with (migration 0009),
// and the time of its previous heartbeat. appliedChecked decides only SQLite's applied
// revisions: on PostgreSQL every heartbeat statement compares them (qHeartbeatPostgres).
type heartbeatMarks struct {
	last           int64
	historyAt      int64
	historyKey     string
	unpruned       int64
	appliedChecked string
}

// heartbeatPlan is what a heartbeat writes besides the cluster's row, decided from the marks
// it read: planHeartbeat is the one place both stores decide it.
type heartbeatPlan struct {
	// record is the history record, its time and state set.
	record store.HeartbeatRecord
	// setApplied: the desired bundles' applied revisions are set from the heartbeat.
	setApplied bool
	// addHistory: record is added to the history; prune: and the history pruned to its limit.
	addHistory, prune bool
	// next are the marks the row is written with.
	next heartbeatMarks
}

// planHeartbeat decides a heartbeat's writes from its cluster's marks m. A history record is
// added unless the newest one is recent and differs from it in nothing but the item count
// (store.HistoryInterval); every pruneEvery records the history is pruned to its limit.
func planHeartbeat(h store.Heartbeat, m heartbeatMarks) heartbeatPlan {
	p := heartbeatPlan{record: h.Record, next: m}
	p.record.At = h.At
	if h.StateAt != nil {
		p.record.State = h.StateAt(fromMS(m.last))
	}
	p.next.last = ms(h.At)
	p.setApplied = m.appliedChecked != h.AppliedDigest
	p.next.appliedChecked = h.AppliedDigest
	key := historyKey(p.record)
	if key == m.historyKey && p.record.At.Sub(fromMS(m.historyAt)) < store.HistoryInterval {
		return p
	}
	p.addHistory = true
	p.next.historyAt, p.next.historyKey, p.next.unpruned = ms(p.record.At), key, m.unpruned+1
	if p.next.unpruned >= pruneEvery {
		p.prune, p.next.unpruned = true, 0
	}
	return p
}

// appliedUnchecked marks a cluster whose desired bundles were rewritten: its next heartbeat
// sets the applied revisions whatever digest it reports. The heartbeat writes its digest over
// the mark only if the mark is still what it read: a bundle written on another connection
// between the heartbeat's read and its write (PostgreSQL re-reads the row for the update)
// keeps the mark for the next heartbeat.
const appliedUnchecked = "!"

// pruneEvery is how many history records a cluster adds between two prunes to HistoryLimit:
// the table holds at most HistoryLimit+pruneEvery-1 of a cluster's records, and Heartbeats
// never answers more than HistoryLimit.
const pruneEvery = 16

// recordApplied sets each desired bundle's applied revision to what the heartbeat reports (0
// for a bundle it does not report), writing only the rows that change.
func (s *Store) recordApplied(ctx context.Context, tx *sql.Tx, h store.Heartbeat) error {
	st := s.txStmt(ctx, tx, qAppliedRead)
	rows, err := st.QueryContext(ctx, h.Cluster)
	if err != nil {
		return fmt.Errorf("reading applied revisions of %s: %w", h.Cluster, err)
	}
	changed := map[string]int64{}
	for rows.Next() {
		var (
			bundle string
			rev    int64
		)
		if err := rows.Scan(&bundle, &rev); err != nil {
			rows.Close()
			return fmt.Errorf("reading applied revisions of %s: %w", h.Cluster, err)
		}
		if want := h.Applied[bundle]; want != rev {
			changed[bundle] = want
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading applied revisions of %s: %w", h.Cluster, err)
	}
	if len(changed) == 0 {
		return nil
	}
	up := s.txStmt(ctx, tx, qAppliedWrite)
	for bundle, rev := range changed {
		if _, err := up.ExecContext(ctx, rev, h.Cluster, bundle); err != nil {
			return fmt.Errorf("recording applied revision of %s/%s: %w", h.Cluster, bundle, err)
		}
	}
	return nil
}

// recordHistory adds the plan's record to the cluster's history and, when the plan says so,
// prunes the cluster's oldest records beyond HistoryLimit.
func (s *Store) recordHistory(ctx context.Context, tx *sql.Tx, cluster string, p heartbeatPlan) error {
	rec := p.record
	ins := s.txStmt(ctx, tx, qHistoryInsert)
	if _, err := ins.ExecContext(ctx, cluster, ms(rec.At), rec.AgentVersion, rec.AppliedDigest,
		rec.Inventories, rec.Items, rec.InventoriesNotReady, rec.SinkErrors, rec.State); err != nil {
		return fmt.Errorf("recording the heartbeat history of %s: %w", cluster, err)
	}
	if !p.prune {
		return nil
	}
	// Everything from the (HistoryLimit+1)-th newest row down.
	prune := s.txStmt(ctx, tx, qHistoryPrune)
	if _, err := prune.ExecContext(ctx, cluster, cluster, store.HistoryLimit); err != nil {
		return fmt.Errorf("pruning the heartbeat history of %s: %w", cluster, err)
	}
	return nil
}

// historyKey is a record's values besides its time and item count (SameBesidesItems), as the
// cluster's row keeps them for the newest record.
func historyKey(r store.HeartbeatRecord) string {
	return fmt.Sprintf("%q %q %d %d %d %q", r.AgentVersion, r.AppliedDigest, r.Inventories, r.InventoriesNotReady,
		r.SinkErrors, r.State)
}

// Heartbeats implements store.Store.
func (s *Store) Heartbeats(ctx context.Context, cluster string, limit int) ([]store.HeartbeatRecord, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM clusters WHERE name = ?`), cluster).Scan(&n); err != nil {
		return nil, fmt.Errorf("reading cluster %s: %w", cluster, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("cluster %s: %w", cluster, store.ErrNotFound)
	}
	return queryAll(ctx, s.db, "the heartbeat history of "+cluster, scanHeartbeat, s.q(`SELECT `+heartbeatCols+`
		FROM cluster_heartbeats WHERE cluster = ? ORDER BY id DESC LIMIT ?`), cluster, min(limit, store.HistoryLimit))
}
