package auth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
)

// fleetStore is a fleet's credentials behind the store calls a CredentialCache makes,
// counting the reads.
type fleetStore struct {
	store.Store
	mu                  sync.Mutex
	epoch               int64
	clusters            map[string]store.Cluster // by name
	pointReads, refresh int
}

func (s *fleetStore) ClusterEpoch(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch, nil
}

func (s *fleetStore) ClusterByCredential(_ context.Context, hash string) (store.Cluster, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pointReads++
	for _, c := range s.clusters {
		if c.CredentialHash == hash || c.PreviousCredentialHash == hash {
			return c, nil
		}
	}
	return store.Cluster{}, store.ErrNotFound
}

func (s *fleetStore) ClusterCredentials(context.Context) ([]store.Cluster, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh++
	var out []store.Cluster
	for _, c := range s.clusters {
		out = append(out, c)
	}
	return out, nil
}

func (s *fleetStore) change(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	s.epoch++
}

// TestRefreshReadsTheFleetOnce: after registrations moved the cluster epoch, Refresh brings
// every cached credential up to it with one read, so that checking them all reads no cluster;
// a revocation, a replacement and a rotation made before it show.
func TestRefreshReadsTheFleetOnce(t *testing.T) {
	ctx := context.Background()
	st := &fleetStore{clusters: map[string]store.Cluster{}}
	const n = 100
	for i := range n {
		name := fmt.Sprint("edge-", i)
		st.clusters[name] = store.Cluster{Name: name, CredentialHash: "cred-" + name}
	}
	c := NewCredentialCache(st, nil)
	for i := range n {
		if _, err := c.Lookup(ctx, fmt.Sprint("cred-edge-", i)); err != nil {
			t.Fatal(err)
		}
	}
	st.change(func() {
		st.clusters["edge-1"] = store.Cluster{Name: "edge-1", CredentialHash: "cred-edge-1", Revoked: true}
		st.clusters["edge-2"] = store.Cluster{Name: "edge-2", CredentialHash: "new-edge-2"}
		st.clusters["edge-3"] = store.Cluster{Name: "edge-3", CredentialHash: "new-edge-3",
			PreviousCredentialHash: "cred-edge-3", PreviousExpiresAt: time.Now().Add(time.Hour)}
	})
	reads := st.pointReads
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if st.refresh != 1 {
		t.Fatalf("%d reads of the fleet's credentials, want 1", st.refresh)
	}
	for i := range n {
		hash := fmt.Sprint("cred-edge-", i)
		cl, err := c.LookupRecent(ctx, hash, time.Minute)
		switch i {
		case 1:
			if err != nil || !cl.Revoked {
				t.Errorf("the revoked cluster after a refresh: %+v %v", cl, err)
			}
		case 2:
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the replaced credential after a refresh: %+v %v, want ErrNotFound", cl, err)
			}
		case 3:
			if err != nil || cl.PreviousCredentialHash != hash || cl.CredentialHash != "new-edge-3" {
				t.Errorf("the rotated credential after a refresh: %+v %v", cl, err)
			}
		default:
			if err != nil || cl.Name != fmt.Sprint("edge-", i) {
				t.Errorf("%s after a refresh: %+v %v", hash, cl, err)
			}
		}
	}
	// Only the replaced credential, which no cluster holds any more, was read again.
	if got := st.pointReads - reads; got != 1 {
		t.Fatalf("checking %d credentials after a refresh read %d clusters, want 1", n, got)
	}

	// A few stale entries are not worth a read of the whole fleet.
	st.change(func() {})
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if st.refresh != 2 {
		t.Fatalf("%d reads of the fleet's credentials, want 2", st.refresh)
	}
	c.mu.Lock()
	for h := range c.entries {
		if len(c.entries) <= staleForRefresh {
			break
		}
		delete(c.entries, h)
	}
	c.mu.Unlock()
	st.change(func() {})
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if st.refresh != 2 {
		t.Fatalf("a refresh of %d stale entries read the fleet's credentials", staleForRefresh)
	}
}
