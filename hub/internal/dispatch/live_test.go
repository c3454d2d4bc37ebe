package dispatch

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/store"
	"kollect.dev/hub/internal/store/sqlstore"
)

// countingStore counts the reads of the fleet's membership.
type countingStore struct {
	store.Store
	reads int
}

func (c *countingStore) LiveClusters(ctx context.Context) ([]string, error) {
	c.reads++
	return c.Store.LiveClusters(ctx)
}

// TestLiveClustersReadOnlyWhenTheClusterEpochMoves: snapshots built while no cluster joined or
// left reuse the membership; a registration and a revocation, which move the cluster epoch,
// are read at the next snapshot.
func TestLiveClustersReadOnlyWhenTheClusterEpochMoves(t *testing.T) {
	ctx := context.Background()
	st, err := sqlstore.Open(ctx, filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := &countingStore{Store: st}
	now := time.Now()
	if err := s.CreateBootstrapToken(ctx, store.BootstrapToken{ID: "t", Hash: "h", ExpiresAt: now.Add(time.Hour), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	register := func(name string) {
		t.Helper()
		if _, err := s.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h", Name: name, CredentialHash: "cred-" + name, Now: now},
			labelsel.Match); err != nil {
			t.Fatal(err)
		}
	}
	register("a")
	var l liveClusters
	check := func(what string, want []string, reads int) {
		t.Helper()
		got, err := l.read(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) || s.reads != reads {
			t.Fatalf("%s: live %v after %d reads of the store, want %v after %d", what, got, s.reads, want, reads)
		}
	}
	check("first snapshot", []string{"a"}, 1)
	check("a snapshot with nobody joining", []string{"a"}, 1)
	check("and another", []string{"a"}, 1)
	register("b")
	check("after a registration", []string{"a", "b"}, 2)
	if err := s.RevokeCluster(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	check("after a revocation", []string{"b"}, 3)
	l.at = time.Now().Add(-liveRescan) // trusted no longer than liveRescan
	check("after liveRescan", []string{"b"}, 4)
}
