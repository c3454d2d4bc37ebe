package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// Querier is a pool, connection or transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Query reads rows of the sink's table in schema matching f, ordered by cluster, kind,
// namespace and name. It is what `kollect query` runs against a Postgres sink.
func Query(ctx context.Context, db Querier, schema, table string, f sink.RowFilter) ([]sink.StoredRow, error) {
	n := names{schema: schema, table: table}
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	for _, c := range []struct{ col, v string }{
		{"cluster", f.Cluster}, {"inventory", f.Inventory}, {"kind", f.Kind}, {"namespace", f.Namespace}, {"name", f.Name},
	} {
		if c.v != "" {
			add(c.col+" = ?", c.v)
		}
	}
	if len(f.Attributes) > 0 {
		raw, err := json.Marshal(f.Attributes)
		if err != nil {
			return nil, fmt.Errorf("encoding the attribute filter: %w", err)
		}
		add("attributes @> ?::jsonb", string(raw))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	q := "SELECT cluster, inventory, target, api_group, version, kind, namespace, name, uid, profile, profile_generation, " +
		"attributes, first_seen, updated_at FROM " + n.Rows()
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY cluster, kind, namespace, name, inventory, target, uid LIMIT " + strconv.Itoa(limit)
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("querying %s: %w", n.Rows(), err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sink.StoredRow, error) {
		var rec sink.StoredRow
		var attrs []byte
		err := r.Scan(&rec.Cluster, &rec.Inventory, &rec.Target, &rec.Group, &rec.Version, &rec.Kind,
			&rec.Namespace, &rec.Name, &rec.UID, &rec.Profile, &rec.ProfileGeneration, &attrs, &rec.FirstSeen, &rec.UpdatedAt)
		rec.Attributes = canonical(attrs)
		return rec, err
	})
	if err != nil {
		return nil, fmt.Errorf("querying %s: %w", n.Rows(), err)
	}
	return out, nil
}

// canonical re-encodes JSONB output (which orders keys by length, then bytes) in the
// canonical form rows carry, so a read-back row compares equal to the exported one.
func canonical(raw []byte) json.RawMessage {
	var v map[string]any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	out, err := export.EncodeAttributes(v)
	if err != nil {
		return raw
	}
	return out
}

// Query reads rows of this sink's table; see the package-level Query.
func (s *Sink) Query(ctx context.Context, f sink.RowFilter) ([]sink.StoredRow, error) {
	return Query(ctx, s.pool, s.names.schema, s.names.table, f)
}
