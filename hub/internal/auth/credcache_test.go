package auth

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
)

// epochStore answers ClusterEpoch with the epoch at the moment a read begins, holding each read
// until the test lets it go; the rest of store.Store is not called by these tests.
type epochStore struct {
	store.Store
	epoch   atomic.Int64
	reads   atomic.Int64
	started chan struct{}
	release chan struct{}
}

func (s *epochStore) ClusterEpoch(context.Context) (int64, error) {
	e := s.epoch.Load()
	s.reads.Add(1)
	s.started <- struct{}{}
	<-s.release
	return e, nil
}

// TestEpochReadsAreSharedButNeverOlderThanTheCall: calls that arrive while an epoch read is in
// flight share the next read instead of one each, and none of them is answered by the read in
// flight, which began before them and could miss a revocation committed just before they came.
func TestEpochReadsAreSharedButNeverOlderThanTheCall(t *testing.T) {
	st := &epochStore{started: make(chan struct{}), release: make(chan struct{})}
	c := NewCredentialCache(st, nil)
	ctx := context.Background()

	first := make(chan int64)
	go func() {
		e, _ := c.freshEpoch(ctx)
		first <- e
	}()
	<-st.started // the first read is in flight, at epoch 0
	st.epoch.Store(1)
	const callers = 20
	var wg sync.WaitGroup
	got := make([]int64, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = c.freshEpoch(ctx)
		}()
	}
	waitFor(t, func() bool { // every caller has joined the pending read
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.pending != nil && c.pending.calls == callers
	})
	st.release <- struct{}{}
	if e := <-first; e != 0 {
		t.Fatalf("first call: epoch %d, want 0", e)
	}
	<-st.started // the shared read begins after the first ended
	st.release <- struct{}{}
	wg.Wait()
	for i, e := range got {
		if e != 1 {
			t.Fatalf("caller %d got epoch %d, read before it called", i, e)
		}
	}
	if n := st.reads.Load(); n != 2 {
		t.Fatalf("%d reads for %d calls, want 2: the calls during the first read share one", n, callers+1)
	}
}

// TestEpochReadOutlivesItsFirstCaller: the caller that starts a shared read may go away; the
// read still answers the others.
func TestEpochReadOutlivesItsFirstCaller(t *testing.T) {
	st := &epochStore{started: make(chan struct{}), release: make(chan struct{})}
	st.epoch.Store(7)
	c := NewCredentialCache(st, nil)
	ctx, cancel := context.WithCancel(context.Background())
	firstErr := make(chan error)
	go func() {
		_, err := c.freshEpoch(ctx)
		firstErr <- err
	}()
	<-st.started
	other := make(chan int64)
	go func() {
		// Joins the next read: this one began before it.
		e, _ := c.freshEpoch(context.Background())
		other <- e
	}()
	waitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.pending != nil
	})
	cancel()
	st.release <- struct{}{}
	if err := <-firstErr; err != nil {
		t.Fatalf("first call: %v (its read was not cancelled, it ended)", err)
	}
	<-st.started
	st.release <- struct{}{}
	if e := <-other; e != 7 {
		t.Fatalf("other call: epoch %d, want 7", e)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}
