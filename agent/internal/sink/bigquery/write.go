package bigquery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	bq "cloud.google.com/go/bigquery"
	"google.golang.org/api/iterator"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// insertChunk bounds one insertAll request (the API limits requests to 10 MB and recommends
// about 500 rows).
const insertChunk = 500

// stageTTL is how long a staging table survives an agent that died before dropping it.
const stageTTL = time.Hour

type state struct {
	checksum string
	count    int64
	// holder is the state's writer and lastWrite the later of exported_at and confirmed_at;
	// contender and contendedAt the contender mark (see writers.go).
	holder      export.Writer
	lastWrite   time.Time
	contender   export.Writer
	contendedAt time.Time
}

// readState reads, in one query, the state row (nil without one) and the coverage of this
// cluster and inventory, sorted by target. The query starts with "SELECT checksum" like the
// state read always did (the tests tell reads from writes by it).
func (s *Sink) readState(ctx context.Context, cluster, inventory string) (*state, []export.Coverage, error) {
	q := s.client.Query("SELECT checksum, item_count, CAST(NULL AS STRING) AS target, CAST(NULL AS STRING) AS state,\n" +
		"  CAST(NULL AS INT64) AS row_count, CAST(NULL AS INT64) AS extraction_errors, CAST(NULL AS STRING) AS reason,\n" +
		"  agent_version, agent_instance, exported_at, confirmed_at, contender_version, contender_instance, contended_at\n" +
		"FROM " + s.ref(s.cfg.table+"_state") + " WHERE cluster = @cluster AND inventory = @inventory\n" +
		"UNION ALL\n" +
		"SELECT CAST(NULL AS STRING), CAST(NULL AS INT64), target, state, row_count, extraction_errors, reason,\n" +
		"  CAST(NULL AS STRING), CAST(NULL AS STRING), CAST(NULL AS TIMESTAMP), CAST(NULL AS TIMESTAMP), CAST(NULL AS STRING),\n" +
		"  CAST(NULL AS STRING), CAST(NULL AS TIMESTAMP)\n" +
		"FROM " + s.ref(s.cfg.table+"_coverage") + " WHERE cluster = @cluster AND inventory = @inventory")
	q.Parameters = []bq.QueryParameter{{Name: "cluster", Value: cluster}, {Name: "inventory", Value: inventory}}
	it, err := q.Read(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("reading state: %w", err)
	}
	var st *state
	var cov []export.Coverage
	for {
		var row []bq.Value
		err := it.Next(&row)
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading state: %w", err)
		}
		if target, ok := row[2].(string); ok {
			c := export.Coverage{Target: target}
			cs, _ := row[3].(string)
			c.State = v1alpha1.CoverageState(cs)
			c.Rows, _ = row[4].(int64)
			c.ExtractionErrors, _ = row[5].(int64)
			c.Reason, _ = row[6].(string)
			cov = append(cov, c)
			continue
		}
		st = &state{}
		st.checksum, _ = row[0].(string)
		st.count, _ = row[1].(int64)
		st.holder.Version, _ = row[7].(string)
		st.holder.Instance, _ = row[8].(string)
		st.lastWrite, _ = row[9].(time.Time)
		if confirmed, ok := row[10].(time.Time); ok && confirmed.After(st.lastWrite) {
			st.lastWrite = confirmed
		}
		st.contender.Version, _ = row[11].(string)
		st.contender.Instance, _ = row[12].(string)
		st.contendedAt, _ = row[13].(time.Time)
	}
	slices.SortFunc(cov, func(a, b export.Coverage) int { return strings.Compare(a.Target, b.Target) })
	return st, cov, nil
}

// export writes the batch; outcome is the writer conflict to report (see writers.go): a
// refusal, after which only the contender mark was written, or the contention of an export
// that succeeded.
func (s *Sink) export(ctx context.Context, b *sink.Batch) (outcome, err error) {
	env := &b.Envelope
	st, stored, err := s.readState(ctx, env.Cluster, env.Inventory)
	if err != nil {
		return nil, err
	}
	at := env.ExportedAt
	if at.IsZero() {
		at = time.Now()
	}
	check := s.check(st, env.Cluster, env.Inventory, env.Writer, at, b.ConflictWindow)
	if refusal := check.Refusal(); refusal != nil {
		return refusal, s.markContender(ctx, env.Cluster, env.Inventory, env.Writer, at)
	}
	takeover := s.takeover(check)
	outcome = check.Contention()
	covSQL, covParams := s.coverageSQL(diffCoverage(stored, batchCoverage(env)))
	unchanged := st != nil && st.checksum == env.Checksum
	if unchanged && b.Resync {
		drift, err := s.drifted(ctx, env)
		if err != nil {
			return nil, err
		}
		unchanged = !drift
	}
	var full bool
	switch {
	case unchanged:
		if covSQL == "" && !takeover {
			return outcome, nil
		}
		// Only the coverage changed (a target turned forbidden, its rows kept), or the writer
		// (a takeover of the same rows): no row is staged or written.
		return outcome, s.exportCoverage(ctx, env, covSQL, covParams)
	case st != nil && st.checksum == b.PreviousChecksum && !b.Diff.Full && !b.Resync:
		full = false
	default:
		full = true
	}
	stage := s.cfg.table + "_stage_" + randomSuffix()
	tbl := s.client.Dataset(s.cfg.dataset).Table(stage)
	if err := tbl.Create(ctx, &bq.TableMetadata{Schema: stageSchema, ExpirationTime: time.Now().Add(stageTTL)}); err != nil {
		return nil, fmt.Errorf("creating staging table: %w", err)
	}
	// Dropping it is tidiness, not correctness: it expires anyway.
	defer func() { _ = tbl.Delete(context.WithoutCancel(ctx)) }()
	var staged []*stageRow
	if full {
		staged = stageRows("upsert", env.Rows)
	} else {
		staged = append(stageRows("upsert", b.Diff.Upserts()), stageRows("delete", b.Diff.Deleted)...)
	}
	ins := tbl.Inserter()
	for start := 0; start < len(staged); start += insertChunk {
		if err := ins.Put(ctx, staged[start:min(start+insertChunk, len(staged))]); err != nil {
			return nil, fmt.Errorf("staging rows %d-%d of %d: %w", start, min(start+insertChunk, len(staged)), len(staged), err)
		}
	}
	q := s.client.Query(s.script(s.ref(stage), full, covSQL, export.Complete(batchCoverage(&b.Envelope))))
	q.Parameters = []bq.QueryParameter{
		{Name: "cluster", Value: env.Cluster}, {Name: "inventory", Value: env.Inventory},
		{Name: "checksum", Value: env.Checksum}, {Name: "item_count", Value: int64(len(env.Rows))},
		{Name: "exported_at", Value: at.UTC().Truncate(time.Microsecond)},
		{Name: "agent_version", Value: env.Writer.Version}, {Name: "agent_instance", Value: env.Writer.Instance},
		// TIMESTAMP keeps microseconds: the script finds the rows it wrote by this exact value.
		{Name: "now", Value: time.Now().UTC().Truncate(time.Microsecond)},
	}
	q.Parameters = append(q.Parameters, covParams...)
	if err := s.mutate(ctx, "applying the staged rows", readQuery(q)); err != nil {
		return nil, fmt.Errorf("applying the staged rows: %w", err)
	}
	return outcome, nil
}

// exportCoverage is the transaction of a batch whose rows the state holds already: the
// coverage change, and the state's writer and, when every target is complete, confirmed_at
// (the export confirms, as the delivery worker counts it). checksum, item_count and
// exported_at, the rows' last change, stay.
func (s *Sink) exportCoverage(ctx context.Context, env *export.Envelope, covSQL string, covParams []bq.QueryParameter) error {
	at := env.ExportedAt
	if at.IsZero() {
		at = time.Now()
	}
	confirm := ""
	params := []bq.QueryParameter{
		{Name: "cluster", Value: env.Cluster}, {Name: "inventory", Value: env.Inventory}, {Name: "checksum", Value: env.Checksum},
		{Name: "agent_version", Value: env.Writer.Version}, {Name: "agent_instance", Value: env.Writer.Instance},
		{Name: "now", Value: time.Now().UTC().Truncate(time.Microsecond)},
	}
	if export.Complete(batchCoverage(env)) {
		confirm = ", confirmed_at = CAST(@exported_at AS TIMESTAMP)"
		params = append(params, bq.QueryParameter{Name: "exported_at", Value: at.UTC().Truncate(time.Microsecond)})
	}
	q := s.client.Query("BEGIN TRANSACTION;\n" + covSQL +
		"UPDATE " + s.ref(s.cfg.table+"_state") + " SET agent_version = CAST(@agent_version AS STRING), agent_instance = CAST(@agent_instance AS STRING)" + confirm + "\n" +
		"WHERE cluster = @cluster AND inventory = @inventory AND checksum = @checksum;\n" +
		"COMMIT TRANSACTION;")
	q.Parameters = append(params, covParams...)
	if err := s.mutate(ctx, "writing the coverage", readQuery(q)); err != nil {
		return fmt.Errorf("writing the coverage: %w", err)
	}
	return nil
}

// readQuery runs q to its end, as a mutating job for Sink.mutate.
func readQuery(q *bq.Query) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := q.Read(ctx)
		return err
	}
}

// runJob runs q as a job and waits for it; status is the finished job's.
func runJob(ctx context.Context, q *bq.Query) (*bq.JobStatus, error) {
	job, err := q.Run(ctx)
	if err != nil {
		return nil, err
	}
	status, err := job.Wait(ctx)
	if err == nil {
		err = status.Err()
	}
	return status, err
}

// script is the transaction that applies a staged export: the new version of changed rows
// (keeping first_seen) and the new rows, then the removal of old versions, deleted rows and,
// on a full reconcile, this cluster's and inventory's rows the snapshot lacks, then the state.
//
// It is plain INSERT … SELECT and DELETE with uncorrelated IN subqueries rather than one
// MERGE: the BigQuery emulator the tests run against cannot run this MERGE (it supports a
// single equality in ON and ignores the conditions of WHEN clauses), nor UPDATE with a join,
// nor correlated subqueries in DML; this formulation is documented BigQuery SQL that both
// run alike. Rows are matched on target || '/' || uid, which is unambiguous because a
// Kubernetes UID never holds a '/'. CAST of the parameters is a no-op on BigQuery, where
// they are typed; the emulator needs it to type parameters in a SELECT list.
//
// It is idempotent, which retrying it after a conflict (conflict.go) or an ambiguous failure
// relies on: run again with the same parameters after it committed, steps 1 and 2 find every
// row equal or present, step 3 nothing older than @now, and the state its checksum.
func (s *Sink) script(stage string, full bool, coverage string, complete bool) string {
	rows := s.ref(s.cfg.table)
	scope := "cluster = @cluster AND inventory = @inventory"
	key := "CONCAT(target, '/', uid)"
	changed := []string{}
	for _, c := range []string{"api_group", "version", "kind", "namespace", "name"} {
		changed = append(changed, "T."+c+" != S."+c)
	}
	// A row from before the provenance columns has NULL there: IFNULL makes it differ.
	changed = append(changed, "IFNULL(T.profile, '') != S.profile", "IFNULL(T.profile_generation, -1) != S.profile_generation",
		"TO_JSON_STRING(T.attributes) != TO_JSON_STRING(PARSE_JSON(S.attributes))")
	insert := "INSERT INTO " + rows + " (cluster, inventory, target, api_group, version, kind, namespace, name, uid, profile, profile_generation, " +
		"attributes, first_seen, updated_at)\n" +
		"SELECT CAST(@cluster AS STRING), CAST(@inventory AS STRING), S.target, S.api_group, S.version, S.kind, S.namespace, S.name, S.uid, " +
		"S.profile, S.profile_generation, PARSE_JSON(S.attributes), "
	now := "CAST(@now AS TIMESTAMP)"
	var sb strings.Builder
	sb.WriteString("BEGIN TRANSACTION;\n")
	// 1. Changed rows: the new version beside the old one, which step 3 removes.
	fmt.Fprintf(&sb, "%sT.first_seen, %s\nFROM %s S JOIN (SELECT * FROM %s WHERE %s) T ON T.target = S.target AND T.uid = S.uid\n"+
		"WHERE S.op = 'upsert' AND (%s);\n", insert, now, stage, rows, scope, strings.Join(changed, " OR "))
	// 2. New rows.
	fmt.Fprintf(&sb, "%s%s, %s\nFROM %s S\nWHERE S.op = 'upsert' AND CONCAT(S.target, '/', S.uid) NOT IN (SELECT %s FROM %s WHERE %s);\n",
		insert, now, now, stage, key, rows, scope)
	// 3. Old versions of the rows step 1 rewrote, deleted rows, and on a full reconcile the
	// rows the snapshot lacks: always within this cluster and inventory.
	fmt.Fprintf(&sb, "DELETE FROM %s WHERE %s AND (\n"+
		"  (updated_at != %s AND %s IN (SELECT %s FROM %s WHERE %s AND updated_at = %s))\n"+
		"  OR %s IN (SELECT %s FROM %s WHERE op = 'delete')", rows, scope, now, key, key, rows, scope, now, key, key, stage)
	if full {
		fmt.Fprintf(&sb, "\n  OR %s NOT IN (SELECT %s FROM %s)", key, key, stage)
	}
	sb.WriteString(");\n")
	// 4. The coverage, when it changed (coverageSQL).
	sb.WriteString(coverage)
	// 5. The state, only when it changes: a resync that finds the table holding this checksum
	// already leaves the state row as it is, so static data writes nothing.
	state := s.ref(s.cfg.table + "_state")
	// An export of a complete snapshot confirms too (confirmed_at = exported_at); one whose
	// coverage is not complete keeps confirmed_at, as the delivery worker's confirmation does:
	// kept rows of a target the agent cannot see are not confirmed current. The state row, and
	// only it, names the exporting agent.
	confirm := ""
	if complete {
		confirm = ", confirmed_at = CAST(@exported_at AS TIMESTAMP)"
	}
	fmt.Fprintf(&sb, "UPDATE %s SET checksum = CAST(@checksum AS STRING), item_count = CAST(@item_count AS INT64), "+
		"exported_at = CAST(@exported_at AS TIMESTAMP)%s, agent_version = CAST(@agent_version AS STRING), agent_instance = CAST(@agent_instance AS STRING)\n"+
		"WHERE %s AND checksum != CAST(@checksum AS STRING);\n", state, confirm, scope)
	fmt.Fprintf(&sb, "INSERT INTO %s (cluster, inventory, checksum, item_count, exported_at, confirmed_at, agent_version, agent_instance)\n"+
		"SELECT CAST(@cluster AS STRING), CAST(@inventory AS STRING), CAST(@checksum AS STRING), CAST(@item_count AS INT64), "+
		"CAST(@exported_at AS TIMESTAMP), CAST(@exported_at AS TIMESTAMP), CAST(@agent_version AS STRING), CAST(@agent_instance AS STRING)\n"+
		"FROM (SELECT 1) WHERE (SELECT COUNT(*) FROM %s WHERE %s) = 0;\n", state, state, scope)
	sb.WriteString("COMMIT TRANSACTION;")
	return sb.String()
}

// stageRow is one staged operation.
type stageRow struct {
	op  string
	row *export.Row
}

func stageRows(op string, rows []export.Row) []*stageRow {
	out := make([]*stageRow, len(rows))
	for i := range rows {
		out[i] = &stageRow{op: op, row: &rows[i]}
	}
	return out
}

// Save implements bigquery.ValueSaver. The insert ID makes a retried insertAll request
// idempotent within BigQuery's deduplication window.
func (r *stageRow) Save() (map[string]bq.Value, string, error) {
	attrs := stagedAttributes(r.row)
	return map[string]bq.Value{
		"op": r.op, "target": r.row.Target, "api_group": r.row.Group, "version": r.row.Version, "kind": r.row.Kind,
		"namespace": r.row.Namespace, "name": r.row.Name, "uid": r.row.UID,
		"profile": r.row.Profile, "profile_generation": r.row.ProfileGeneration, "attributes": attrs,
	}, r.op + "/" + r.row.Key().String(), nil
}

// stagedAttributes is the attributes document staged for r: "{}" when it has none.
func stagedAttributes(r *export.Row) string {
	if len(r.Attributes) == 0 {
		return "{}"
	}
	return string(r.Attributes)
}
