package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(...any) error }

// queryer is a *sql.DB or *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryAll runs a query and scans every row with scan; what names the rows in errors
// ("listing <what>").
func queryAll[T any](ctx context.Context, db queryer, what string, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	return out, nil
}

func scanString(sc scanner) (string, error) {
	var v string
	err := sc.Scan(&v)
	return v, err
}

// valuesParams bounds the parameters of one execValues statement: well under SQLite's limit
// of bound parameters (32,766) and PostgreSQL's (65,535).
const valuesParams = 5000

// execValues runs head + " VALUES (?, …), (?, …)" + tail for n rows of cols values each, as
// few statements as valuesParams allows: one round trip per few hundred rows instead of one
// per row (a rollout of 10,000 clusters wrote its rows in 10,000 round trips, 9 s on
// PostgreSQL). row appends row i's values to dst. A statement with ON CONFLICT DO UPDATE in
// tail must not name a key twice (PostgreSQL refuses to update a row twice in one statement).
func (s *Store) execValues(ctx context.Context, tx *sql.Tx, head, tail string, cols, n int, row func(i int, dst []any) []any) error {
	tuple := "(?" + strings.Repeat(", ?", cols-1) + ")"
	per := max(1, valuesParams/cols)
	for start := 0; start < n; start += per {
		end := min(n, start+per)
		args := make([]any, 0, (end-start)*cols)
		for i := start; i < end; i++ {
			args = row(i, args)
		}
		q := head + " VALUES " + tuple + strings.Repeat(", "+tuple, end-start-1) + " " + tail
		if _, err := tx.ExecContext(ctx, s.q(q), args...); err != nil {
			return fmt.Errorf("rows %d-%d of %d: %w", start+1, end, n, err)
		}
	}
	return nil
}
