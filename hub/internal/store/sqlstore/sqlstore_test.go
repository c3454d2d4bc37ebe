package sqlstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"kollect.dev/hub/internal/store"
	"kollect.dev/hub/internal/store/sqlstore"
	"kollect.dev/hub/internal/store/storetest"
	"kollect.dev/testenv"
)

// pg is the PostgreSQL server shared by this package's tests; a missing server fails the run.
var pg *testenv.Postgres

func TestMain(m *testing.M) {
	var err error
	pg, err = testenv.StartPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting PostgreSQL for the store tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

func TestSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := sqlstore.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

var dbSeq atomic.Int64

func TestPostgres(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		url, err := pg.CreateDatabase(context.Background(), fmt.Sprintf("hubstore_%d", dbSeq.Add(1)))
		if err != nil {
			t.Fatal(err)
		}
		s, err := sqlstore.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestMigrationsAreIdempotent opens the same databases twice, as a restarted hub or a second
// replica does.
func TestMigrationsAreIdempotent(t *testing.T) {
	ctx := context.Background()
	url, err := pg.CreateDatabase(ctx, "hubstore_reopen")
	if err != nil {
		t.Fatal(err)
	}
	for _, dsn := range []string{filepath.Join(t.TempDir(), "hub.db"), url} {
		for range 2 {
			s, err := sqlstore.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("opening %s: %v", dsn, err)
			}
			if _, err := s.ConfigEpoch(ctx); err != nil {
				t.Fatal(err)
			}
			s.Close()
		}
	}
}

// TestPostgresSessionsUseGenericPlans: the store's sessions plan each prepared statement once
// (PostgreSQL re-planned the heartbeat statement at every call), unless the URL chooses.
func TestPostgresSessionsUseGenericPlans(t *testing.T) {
	ctx := context.Background()
	url, err := pg.CreateDatabase(ctx, "hubstore_plans")
	if err != nil {
		t.Fatal(err)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for dsn, want := range map[string]string{url: "force_generic_plan", url + sep + "plan_cache_mode=auto": "auto"} {
		s, err := sqlstore.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = sqlstore.DB(s).QueryRowContext(ctx, "SHOW plan_cache_mode").Scan(&got)
		s.Close()
		if err != nil || got != want {
			t.Errorf("plan_cache_mode %q (%v), want %q", got, err, want)
		}
	}
}
