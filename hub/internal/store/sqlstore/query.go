package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
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
