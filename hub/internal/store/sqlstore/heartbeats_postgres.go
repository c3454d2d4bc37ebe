package sqlstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"kollect.dev/hub/internal/store"
)

// On PostgreSQL every statement is a round trip, and a heartbeat in a transaction of prepared
// statements was five to eight of them (begin, the marks, the applied revisions read and
// written, the history, the row, commit): at 10,000 agents, most of the database's work in a
// rollout. A heartbeat is now one statement, qHeartbeatPostgres, that writes the row, the
// changed applied revisions, the history record and its pruning together, on the condition
// that the row's marks are still those the history was planned from (a compare-and-set). The
// marks come from this replica's own last write of the row (marksCache): an agent keeps its
// stream, and so its heartbeats, on one replica, so the common heartbeat is that one
// statement. When the condition fails — another replica's heartbeat, a re-registration, or no
// marks cached — the statement answers the row's marks as it found them, and the heartbeat is
// planned again from those: two statements.
//
// A heartbeat checked against the caller's cached credential (store.Heartbeat.Credential)
// writes only if the row still holds that credential: the credential check that would
// otherwise read the cluster epoch first rides on the same statement, and a credential
// revoked or replaced through any replica is still refused at its next heartbeat.
//
// The applied revisions are compared by every statement (the cluster's few cluster_bundles
// rows, in the same round trip) rather than only when applied_checked says so: a rewrite of
// the cluster's desired bundles, which every wave of a rollout makes, then leaves the
// condition standing, and a bundle row committed while the statement ran is set by the next
// heartbeat.
const qHeartbeatPostgres = `WITH c AS (
	UPDATE clusters SET last_heartbeat = $2, agent_version = $3, kubernetes_version = $4, applied_digest = $5,
		status = $6, history_at = $7, history_key = $8, history_unpruned = $9, applied_checked = $5,
		credential_used = CASE WHEN credential_hash = $29 THEN 1 ELSE credential_used END
	WHERE name = $1 AND revoked = 0 AND last_heartbeat = $10 AND history_at = $11 AND history_key = $12
		AND history_unpruned = $13 AND ` + credentialHeld + `
	RETURNING name
), applied AS (
	-- Each desired bundle of the cluster at the revision reported (0: not reported).
	UPDATE cluster_bundles cb SET applied_revision = want.revision
	FROM (SELECT d.bundle, COALESCE(r.revision, 0) AS revision
		FROM cluster_bundles d LEFT JOIN unnest($14::text[], $15::bigint[]) AS r(bundle, revision) ON r.bundle = d.bundle
		WHERE d.cluster IN (SELECT name FROM c)) AS want
	WHERE cb.cluster IN (SELECT name FROM c) AND cb.bundle = want.bundle AND cb.applied_revision <> want.revision
), history AS (
	INSERT INTO cluster_heartbeats (cluster, ` + heartbeatCols + `)
	SELECT name, $2, $3, $5, $17, $18, $19, $20, $21 FROM c WHERE $16::boolean
), pruned AS (
	-- The statement's snapshot does not hold the record inserted above: keeping the newest
	-- HistoryLimit-1 older ones keeps HistoryLimit.
	DELETE FROM cluster_heartbeats WHERE $22::boolean AND cluster IN (SELECT name FROM c) AND id <= (
		SELECT id FROM cluster_heartbeats WHERE cluster = $1 ORDER BY id DESC LIMIT 1 OFFSET $23)
)
SELECT (SELECT COUNT(*) FROM c), cl.name IS NOT NULL, COALESCE(cl.last_heartbeat, 0), COALESCE(cl.history_at, 0),
	COALESCE(cl.history_key, ''), COALESCE(cl.history_unpruned, 0), COALESCE(` + credentialHeld + `, false)
FROM (SELECT 1) AS one LEFT JOIN clusters cl ON cl.name = $1 AND cl.revoked = 0`

// credentialHeld is qHeartbeatPostgres's condition that the row holds the credential the
// heartbeat was checked against ($24: check it; $25 to $28: store.CredentialFacts).
const credentialHeld = `(NOT $24::boolean OR (credential_hash = $25 AND credential_expires_at = $26
	AND previous_credential_hash = $27 AND previous_expires_at = $28))`

// heartbeatAttempts bounds how often a heartbeat is planned again when the marks keep moving
// under it. The marks a failed statement answers are those of its snapshot: they miss a write
// committed while the statement waited for the row, which the next statement's snapshot holds,
// so three attempts get through one concurrent writer.
const heartbeatAttempts = 4

// unknownMarks are the marks of a cluster this replica has not written: no row has them.
var unknownMarks = heartbeatMarks{last: -1}

// recordHeartbeatPostgres is RecordHeartbeat on PostgreSQL.
func (s *Store) recordHeartbeatPostgres(ctx context.Context, h store.Heartbeat) error {
	bundles := make([]string, 0, len(h.Applied))
	revisions := make([]int64, 0, len(h.Applied))
	for b, r := range h.Applied {
		bundles, revisions = append(bundles, b), append(revisions, r)
	}
	check, cred := h.Credential != nil, store.CredentialFacts{}
	if check {
		cred = *h.Credential
	}
	m, ok := s.marks.get(h.Cluster)
	if !ok {
		m = unknownMarks
	}
	for range heartbeatAttempts {
		p := planHeartbeat(h, m)
		r := p.record
		var (
			written int
			found   bool
			held    bool
			now     heartbeatMarks
		)
		err := s.stmt(qHeartbeatPostgres).QueryRowContext(ctx, h.Cluster,
			p.next.last, h.AgentVersion, h.KubernetesVersion, h.AppliedDigest, h.Status,
			p.next.historyAt, p.next.historyKey, p.next.unpruned,
			m.last, m.historyAt, m.historyKey, m.unpruned,
			bundles, revisions,
			p.addHistory, r.Inventories, r.Items, r.InventoriesNotReady, r.SinkErrors, r.State,
			p.prune, store.HistoryLimit-1,
			check, cred.Hash, ms(cred.ExpiresAt), cred.PreviousHash, ms(cred.PreviousExpiresAt), h.Presented).
			Scan(&written, &found, &now.last, &now.historyAt, &now.historyKey, &now.unpruned, &held)
		if err != nil {
			s.marks.forget(h.Cluster)
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, err)
		}
		if written == 1 {
			s.marks.put(h.Cluster, p.next)
			return nil
		}
		if !found || !held {
			s.marks.forget(h.Cluster)
			return fmt.Errorf("recording heartbeat of %s: %w", h.Cluster, credentialGone(check))
		}
		m = now
	}
	s.marks.forget(h.Cluster)
	return fmt.Errorf("recording heartbeat of %s: its row changed under each of %d attempts", h.Cluster, heartbeatAttempts)
}

// marksCache holds, per cluster, the marks this replica last wrote to its row. An entry is
// only a guess — the statement's condition checks it —, so a stale one costs a second
// statement, never a wrong write. Entries of clusters without a heartbeat for marksUnusedFor
// are dropped, so clusters deleted, or whose agents moved to another replica, do not stay.
type marksCache struct {
	mu        sync.Mutex
	entries   map[string]heartbeatMarks
	lastSweep int64
}

// marksUnusedFor is how long after its last heartbeat a cluster's entry is dropped: far longer
// than any heartbeat interval.
const marksUnusedFor = time.Hour

func (c *marksCache) get(cluster string) (heartbeatMarks, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.entries[cluster]
	return m, ok
}

func (c *marksCache) put(cluster string, m heartbeatMarks) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]heartbeatMarks{}
	}
	c.entries[cluster] = m
	if m.last-c.lastSweep < marksUnusedFor.Milliseconds() {
		return
	}
	c.lastSweep = m.last
	for name, e := range c.entries {
		if m.last-e.last > marksUnusedFor.Milliseconds() {
			delete(c.entries, name)
		}
	}
}

func (c *marksCache) forget(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, cluster)
}
