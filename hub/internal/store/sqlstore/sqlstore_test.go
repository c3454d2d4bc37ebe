package sqlstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
