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
)

// insertChunk bounds one insertAll request (the API limits requests to 10 MB and recommends
// about 500 rows).
const insertChunk = 500

// stageTTL is how long a staging table survives an agent that died before dropping it.
const stageTTL = time.Hour

type state struct {
	checksum string
	count    int64
}

func (s *Sink) readState(ctx context.Context, cluster, inventory string) (*state, error) {
	q := s.client.Query("SELECT checksum, item_count FROM " + s.ref(s.cfg.table+"_state") +
		" WHERE cluster = @cluster AND inventory = @inventory")
	q.Parameters = []bq.QueryParameter{{Name: "cluster", Value: cluster}, {Name: "inventory", Value: inventory}}
	it, err := q.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading state: %w", err)
	}
	var row []bq.Value
	switch err := it.Next(&row); {
	case errors.Is(err, iterator.Done):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading state: %w", err)
	}
	st := &state{}
	st.checksum, _ = row[0].(string)
	st.count, _ = row[1].(int64)
	return st, nil
}

func (s *Sink) export(ctx context.Context, b *export.Batch) error {
	env := &b.Envelope
	st, err := s.readState(ctx, env.Cluster, env.Inventory)
	if err != nil {
		return err
	}
	var full bool
	switch {
	case st != nil && st.checksum == env.Checksum && !b.Resync:
		return nil
	case st != nil && st.checksum == b.PreviousChecksum && !b.Diff.Full && !b.Resync:
		full = false
	default:
		full = true
	}
	stage := s.cfg.table + "_stage_" + randomSuffix()
	tbl := s.client.Dataset(s.cfg.dataset).Table(stage)
	if err := tbl.Create(ctx, &bq.TableMetadata{Schema: stageSchema, ExpirationTime: time.Now().Add(stageTTL)}); err != nil {
		return fmt.Errorf("creating staging table: %w", err)
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
			return fmt.Errorf("staging rows %d-%d of %d: %w", start, min(start+insertChunk, len(staged)), len(staged), err)
		}
	}
	at := env.ExportedAt
	if at.IsZero() {
		at = time.Now()
	}
	q := s.client.Query(s.script(s.ref(stage), full))
	q.Parameters = []bq.QueryParameter{
		{Name: "cluster", Value: env.Cluster}, {Name: "inventory", Value: env.Inventory},
		{Name: "checksum", Value: env.Checksum}, {Name: "item_count", Value: int64(len(env.Rows))},
		{Name: "exported_at", Value: at.UTC()},
	}
	if _, err := q.Read(ctx); err != nil {
		return fmt.Errorf("merging: %w", err)
	}
	return nil
}

// script is the transaction that applies a staged export: the rows MERGE (with deletion of
// unstaged rows of this cluster and inventory on a full reconcile) and the state MERGE.
func (s *Sink) script(stage string, full bool) string {
	changed := []string{}
	for _, c := range []string{"api_group", "version", "kind", "namespace", "name"} {
		changed = append(changed, "T."+c+" != S."+c)
	}
	changed = append(changed, "TO_JSON_STRING(T.attributes) != TO_JSON_STRING(S.attributes)")
	var sb strings.Builder
	sb.WriteString("BEGIN TRANSACTION;\n")
	fmt.Fprintf(&sb, `MERGE %s T
USING %s S
ON T.cluster = @cluster AND T.inventory = @inventory AND T.target = S.target AND T.uid = S.uid
WHEN MATCHED AND S.op = 'delete' THEN DELETE
WHEN MATCHED AND S.op = 'upsert' AND (%s) THEN UPDATE SET
  api_group = S.api_group, version = S.version, kind = S.kind, namespace = S.namespace,
  name = S.name, attributes = S.attributes, updated_at = CURRENT_TIMESTAMP()
WHEN NOT MATCHED BY TARGET AND S.op = 'upsert' THEN INSERT
  (cluster, inventory, target, api_group, version, kind, namespace, name, uid, attributes, first_seen, updated_at)
  VALUES (@cluster, @inventory, S.target, S.api_group, S.version, S.kind, S.namespace, S.name, S.uid, S.attributes,
          CURRENT_TIMESTAMP(), CURRENT_TIMESTAMP())`, s.ref(s.cfg.table), stage, strings.Join(changed, " OR "))
	if full {
		sb.WriteString("\nWHEN NOT MATCHED BY SOURCE AND T.cluster = @cluster AND T.inventory = @inventory THEN DELETE")
	}
	fmt.Fprintf(&sb, `;
MERGE %s T
USING (SELECT @cluster AS cluster, @inventory AS inventory) S
ON T.cluster = S.cluster AND T.inventory = S.inventory
WHEN MATCHED THEN UPDATE SET checksum = @checksum, item_count = @item_count, exported_at = @exported_at
WHEN NOT MATCHED THEN INSERT (cluster, inventory, checksum, item_count, exported_at)
  VALUES (@cluster, @inventory, @checksum, @item_count, @exported_at);
COMMIT TRANSACTION;`, s.ref(s.cfg.table+"_state"))
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
	attrs := string(r.row.Attributes)
	if attrs == "" {
		attrs = "{}"
	}
	return map[string]bq.Value{
		"op": r.op, "target": r.row.Target, "api_group": r.row.Group, "version": r.row.Version, "kind": r.row.Kind,
		"namespace": r.row.Namespace, "name": r.row.Name, "uid": r.row.UID, "attributes": attrs,
	}, r.op + "/" + r.row.Key().String(), nil
}
