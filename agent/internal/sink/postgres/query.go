package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// As of a time, the rows are the versions current then; a version's first_seen and
	// updated_at are both its valid_from, when it became current.
	from, times := n.Rows(), "first_seen, updated_at"
	if !f.AsOf.IsZero() {
		args = append(args, f.AsOf)
		from, times = n.Function("as_of")+"($"+strconv.Itoa(len(args))+")", "valid_from, valid_from"
	}
	q := "SELECT cluster, inventory, target, api_group, version, kind, namespace, name, uid, profile, profile_generation, " +
		"attributes, " + times + " FROM " + from
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY cluster, kind, namespace, name, inventory, target, uid LIMIT " + strconv.Itoa(limit)
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, queryError(n, f, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sink.StoredRow, error) {
		rec := sink.StoredRow{Row: export.Row{Origin: &export.Origin{}}}
		var attrs []byte
		err := r.Scan(&rec.Cluster, &rec.Inventory, &rec.Target, &rec.Group, &rec.Version, &rec.Kind,
			&rec.Namespace, &rec.Name, &rec.UID, &rec.Profile, &rec.ProfileGeneration, &attrs, &rec.FirstSeen, &rec.UpdatedAt)
		rec.Attributes = canonical(attrs)
		return rec, err
	})
	if err != nil {
		return nil, queryError(n, f, err)
	}
	return out, nil
}

// queryError names what was queried; a schema without the history function (migrated by an
// agent older than the history) says so rather than PostgreSQL's "function does not exist".
func queryError(n names, f sink.RowFilter, err error) error {
	if f.AsOf.IsZero() {
		return fmt.Errorf("querying %s: %w", n.Rows(), err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42883" {
		return fmt.Errorf("querying %s as of %s: the schema has no history function %s: an agent of this release must migrate it (history: true on the sink)",
			n.Rows(), f.AsOf.UTC().Format(time.RFC3339), n.Function("as_of"))
	}
	return fmt.Errorf("querying %s as of %s: %w", n.Rows(), f.AsOf.UTC().Format(time.RFC3339), err)
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
