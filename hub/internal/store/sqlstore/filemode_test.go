package sqlstore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
	"kollect.dev/hub/internal/store/sqlstore"
)

// TestSQLiteFilesArePrivate: the database, its WAL and its shared-memory file are readable by
// the hub's user only, for a new store (whatever the umask) and for one whose files an older
// hub left world-readable.
func TestSQLiteFilesArePrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hub.db")
	check := func(when string) {
		t.Helper()
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatalf("%s: %v (the WAL and shared-memory files exist while the store is open and has written)", when, err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %s is %v, want 0600", when, filepath.Base(p), fi.Mode().Perm())
			}
		}
	}
	open := func() *sqlstore.Store {
		t.Helper()
		s, err := sqlstore.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		// A write creates the WAL and the shared-memory file if the migration did not.
		if err := s.AppendAudit(context.Background(), store.AuditEvent{Time: time.Now(), Actor: "test", Action: "Write"}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	check("a new store")
	s.Close()

	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o644); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	s = open()
	defer s.Close()
	check("a store whose files were 0644")
}
