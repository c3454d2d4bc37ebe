package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"kollect.dev/hub/internal/store"
)

// namesPerQuery bounds the names bound to one IN (…) list, well below both databases' limits
// on bound parameters.
const namesPerQuery = 500

// ObserveFleet implements store.Store.
func (s *Store) ObserveFleet(ctx context.Context, bundle string) ([]store.Observed, error) {
	return queryAll(ctx, stmtQueryer{s.stmt(qObserveFleet)}, "the fleet", func(sc scanner) (store.Observed, error) {
		var (
			o                  store.Observed
			labels             string
			revoked, heartbeat int64
		)
		if err := sc.Scan(&o.Name, &labels, &revoked, &heartbeat, &o.Desired); err != nil {
			return o, err
		}
		if err := json.Unmarshal([]byte(labels), &o.Labels); err != nil {
			return o, fmt.Errorf("cluster %s: decoding labels: %w", o.Name, err)
		}
		o.Revoked, o.LastHeartbeat = revoked != 0, fromMS(heartbeat)
		return o, nil
	}, "", bundle)
}

// ObserveClusters implements store.Store.
func (s *Store) ObserveClusters(ctx context.Context, bundle string, names []string) ([]store.Observed, error) {
	var out []store.Observed
	for chunk := range chunks(names) {
		args := append([]any{bundle}, chunk...)
		got, err := queryAll(ctx, s.db, "clusters", func(sc scanner) (store.Observed, error) {
			var (
				o                  store.Observed
				revoked, heartbeat int64
			)
			err := sc.Scan(&o.Name, &revoked, &heartbeat, &o.Desired)
			o.Revoked, o.LastHeartbeat = revoked != 0, fromMS(heartbeat)
			return o, err
		}, s.q(`SELECT c.name, c.revoked, c.last_heartbeat, COALESCE(cb.desired_revision, 0) FROM clusters c
			LEFT JOIN cluster_bundles cb ON cb.cluster = c.name AND cb.bundle = ?
			WHERE c.approval <> 'pending' AND c.name IN (`+placeholders(len(chunk))+`)`), args...)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// ClusterStatuses implements store.Store.
func (s *Store) ClusterStatuses(ctx context.Context, names []string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	for chunk := range chunks(names) {
		type pair struct{ name, status string }
		got, err := queryAll(ctx, s.db, "cluster statuses", func(sc scanner) (pair, error) {
			var p pair
			err := sc.Scan(&p.name, &p.status)
			return p, err
		}, s.q(`SELECT name, status FROM clusters WHERE status <> '' AND name IN (`+placeholders(len(chunk))+`)`), chunk...)
		if err != nil {
			return nil, err
		}
		for _, p := range got {
			out[p.name] = p.status
		}
	}
	return out, nil
}

// chunks yields names namesPerQuery at a time, as query arguments.
func chunks(names []string) func(yield func([]any) bool) {
	return func(yield func([]any) bool) {
		for len(names) > 0 {
			n := min(len(names), namesPerQuery)
			args := make([]any, n)
			for i, name := range names[:n] {
				args[i] = name
			}
			if !yield(args) {
				return
			}
			names = names[n:]
		}
	}
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// stmtQueryer lets queryAll run a prepared statement; queryAll's query argument is ignored.
type stmtQueryer struct{ st *sql.Stmt }

func (q stmtQueryer) QueryContext(ctx context.Context, _ string, args ...any) (*sql.Rows, error) {
	return q.st.QueryContext(ctx, args...)
}
