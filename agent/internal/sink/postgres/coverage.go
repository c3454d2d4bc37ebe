package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"kollect.dev/agent/internal/export"
)

// batchCoverage is the envelope's coverage as the sink stores it: sorted by target, reasons
// bounded, one entry per target. It works on a copy: every sink of the inventory shares the
// envelope's slice.
func batchCoverage(env *export.Envelope) []export.Coverage {
	c := export.NormalizeCoverage(slices.Clone(env.Coverage))
	for i := range c {
		// text holds neither NUL nor invalid UTF-8, and a reason is a message, not data: a
		// reason that cannot be stored must not block the export forever.
		c[i].Reason = strings.ReplaceAll(strings.ToValidUTF8(c[i].Reason, "\uFFFD"), "\x00", "")
	}
	// One entry per target, the first: the primary key allows no more, and an upsert that met
	// one target twice would fail the whole export over what can only be a bug upstream.
	return slices.CompactFunc(c, func(a, b export.Coverage) bool { return a.Target == b.Target })
}

// state is what the state table holds of this cluster and inventory (found is false without
// a state row): the checksum, who wrote it last and when, the contender mark, and the coverage,
// sorted by target.
type state struct {
	checksum    string
	found       bool
	holder      export.Writer
	lastWrite   time.Time
	contender   export.Writer
	contendedAt time.Time
	coverage    []export.Coverage
}

// readState reads the state in one round trip.
func (w *writer) readState(ctx context.Context) (state, error) {
	var st state
	var sum, hv, hi, cv, ci *string
	var last, contended *time.Time
	var raw []byte
	err := w.tx.QueryRow(ctx, `SELECT s.checksum, s.agent_version, s.agent_instance, greatest(s.exported_at, s.confirmed_at),
       s.contender_version, s.contender_instance, s.contended_at,
       (SELECT json_agg(json_build_object('target', target, 'state', state, 'rows', rows,
            'extractionErrors', extraction_errors, 'reason', reason) ORDER BY target)
          FROM `+w.n.Coverage()+` WHERE cluster = $1 AND inventory = $2)
  FROM (SELECT 1) AS one
  LEFT JOIN `+w.n.State()+` s ON s.cluster = $1 AND s.inventory = $2`,
		w.cluster, w.inventory).Scan(&sum, &hv, &hi, &last, &cv, &ci, &contended, &raw)
	if err != nil {
		return st, fmt.Errorf("reading state: %w", err)
	}
	if raw != nil {
		if err := json.Unmarshal(raw, &st.coverage); err != nil {
			return st, fmt.Errorf("reading coverage: %w", err)
		}
	}
	if sum == nil {
		return st, nil
	}
	st.checksum, st.found = *sum, true
	st.holder = export.Writer{Version: deref(hv), Instance: deref(hi)}
	st.contender = export.Writer{Version: deref(cv), Instance: deref(ci)}
	if last != nil {
		st.lastWrite = *last
	}
	if contended != nil {
		st.contendedAt = *contended
	}
	return st, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// saveCoverage makes the coverage table hold exactly cov for this cluster and inventory:
// entries that differ are rewritten (and only they get a new updated_at), new ones inserted,
// and entries of targets no longer covered deleted — never another cluster's or inventory's.
func (w *writer) saveCoverage(ctx context.Context, cov []export.Coverage) error {
	targets, states, reasons := make([]string, len(cov)), make([]string, len(cov)), make([]string, len(cov))
	rows, errs := make([]int64, len(cov)), make([]int64, len(cov))
	for i, c := range cov {
		targets[i], states[i], rows[i], errs[i], reasons[i] = c.Target, string(c.State), c.Rows, c.ExtractionErrors, c.Reason
	}
	if len(cov) > 0 {
		_, err := w.tx.Exec(ctx, `INSERT INTO `+w.n.Coverage()+` AS c
    (cluster, inventory, target, state, rows, extraction_errors, reason, updated_at)
SELECT $1, $2, t.target, t.state, t.rows, t.extraction_errors, t.reason, now()
  FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[]) AS t(target, state, rows, extraction_errors, reason)
ON CONFLICT (cluster, inventory, target) DO UPDATE
   SET state = EXCLUDED.state, rows = EXCLUDED.rows, extraction_errors = EXCLUDED.extraction_errors,
       reason = EXCLUDED.reason, updated_at = EXCLUDED.updated_at
 WHERE (c.state, c.rows, c.extraction_errors, c.reason)
       IS DISTINCT FROM
       (EXCLUDED.state, EXCLUDED.rows, EXCLUDED.extraction_errors, EXCLUDED.reason)`,
			w.cluster, w.inventory, targets, states, rows, errs, reasons)
		if err != nil {
			return fmt.Errorf("upserting the coverage of %d targets: %w", len(cov), err)
		}
	}
	if _, err := w.tx.Exec(ctx, `DELETE FROM `+w.n.Coverage()+`
 WHERE cluster = $1 AND inventory = $2 AND NOT (target = ANY ($3::text[]))`, w.cluster, w.inventory, targets); err != nil {
		return fmt.Errorf("deleting the coverage of targets no longer covered: %w", err)
	}
	return nil
}

// touchState records, for an export whose rows the state already held but whose coverage
// changed, the writer and, when every target is complete, the confirmation the export is
// (as the delivery worker counts it): checksum, item_count and exported_at, the last change
// of the rows, stay.
func (w *writer) touchState(ctx context.Context, env *export.Envelope, complete bool) error {
	at := env.ExportedAt
	if at.IsZero() {
		at = time.Now()
	}
	_, err := w.tx.Exec(ctx, `UPDATE `+w.n.State()+`
   SET agent_version = $3, agent_instance = $4,
       confirmed_at = CASE WHEN $5::boolean THEN greatest(confirmed_at, $6) ELSE confirmed_at END
 WHERE cluster = $1 AND inventory = $2`, w.cluster, w.inventory, env.Writer.Version, env.Writer.Instance, complete, at)
	if err != nil {
		return fmt.Errorf("saving state: %w", err)
	}
	return nil
}
