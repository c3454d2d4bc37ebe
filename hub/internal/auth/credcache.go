package auth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/store"
)

// CredentialCache remembers which cluster holds each agent credential (by hash), so that an
// agent's calls — a heartbeat a minute and a stream recheck every CredentialRecheck, times
// every agent — do not each read the cluster from the store. Every entry carries the cluster
// epoch (store.Store.ClusterEpoch) it was read at, and a call uses it only while the epoch is
// unchanged: any registration, revocation, release, deletion or rotation through any replica
// moves the epoch, so a credential revoked or replaced anywhere is refused at its next call.
// An entry keeps only what authentication and the agent handlers read — the cluster's name,
// revocation and credential fields —, not its labels, versions or status: a hub of 10,000
// agents holds 10,000 entries.
type CredentialCache struct {
	store store.Store
	now   func() time.Time

	mu      sync.Mutex
	entries map[string]*credentialEntry
	// recent is the last epoch read and when, for callers content with a slightly older one.
	recent      int64
	recentAt    time.Time
	lastSweep   time.Time
	lookups     int64
	storeReads  int64
	epochChecks int64
	refreshes   int64
	// pending is the epoch read that calls arriving now join (freshEpoch); reading is held
	// while one runs.
	pending *epochRead
	reading sync.Mutex
}

// epochRead is one read of the cluster epoch shared by the calls that joined it.
type epochRead struct {
	done  chan struct{}
	calls int // the calls sharing it, under CredentialCache.mu until it begins
	epoch int64
	err   error
}

type credentialEntry struct {
	cluster  store.Cluster
	epoch    int64
	lastUsed time.Time
}

// unusedFor is how long an entry stays without a call: agents call at least once a heartbeat
// interval and stream recheck, so only the credentials replaced or of agents gone expire.
const unusedFor = 10 * time.Minute

// NewCredentialCache returns an empty cache over st.
func NewCredentialCache(st store.Store, now func() time.Time) *CredentialCache {
	if now == nil {
		now = time.Now
	}
	return &CredentialCache{store: st, now: now, entries: map[string]*credentialEntry{}}
}

// Lookup returns the cluster holding the credential with this hash as the store holds it now,
// revoked or not (store.ErrNotFound when no cluster holds it); the caller checks it with
// CredentialValid.
func (c *CredentialCache) Lookup(ctx context.Context, hash string) (store.Cluster, error) {
	return c.lookup(ctx, hash, 0)
}

// LookupRecent is Lookup against a cluster epoch read at most maxAge ago: for checks that
// repeat on a timer (an open stream's recheck), where one epoch read a second serves every
// stream of the replica.
func (c *CredentialCache) LookupRecent(ctx context.Context, hash string, maxAge time.Duration) (store.Cluster, error) {
	return c.lookup(ctx, hash, maxAge)
}

func (c *CredentialCache) lookup(ctx context.Context, hash string, maxAge time.Duration) (store.Cluster, error) {
	now := c.now()
	epoch, err := c.epoch(ctx, now, maxAge)
	if err != nil {
		return store.Cluster{}, err
	}
	c.mu.Lock()
	c.lookups++
	if e, ok := c.entries[hash]; ok && e.epoch == epoch {
		e.lastUsed = now
		cl := e.cluster
		c.mu.Unlock()
		return cl, nil
	}
	c.storeReads++
	c.mu.Unlock()
	// The epoch was read first: a change committed after that read moves the epoch past the
	// one stamped here, so the entry is read again at the next call.
	cl, err := c.store.ClusterByCredential(ctx, hash)
	if err != nil {
		return cl, err
	}
	cl = credentialFacts(cl)
	c.mu.Lock()
	c.entries[hash] = &credentialEntry{cluster: cl, epoch: epoch, lastUsed: now}
	c.sweepLocked(now)
	c.mu.Unlock()
	return cl, nil
}

// Verify says whether the credential with this hash lets an agent call at now, looked up
// against a cluster epoch read at most maxAge ago (0: a fresh read): its cluster, or an
// Unauthenticated error saying why not, or Unavailable when the store could not answer.
func (c *CredentialCache) Verify(ctx context.Context, hash string, maxAge time.Duration, now time.Time) (store.Cluster, error) {
	cl, err := c.lookup(ctx, hash, maxAge)
	if errors.Is(err, store.ErrNotFound) {
		return cl, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown or replaced agent credential"))
	}
	if err != nil {
		return cl, connect.NewError(connect.CodeUnavailable, fmt.Errorf("checking agent credential: %w", err))
	}
	return cl, CredentialValid(cl, hash, now)
}

// Cached returns the cluster holding the credential with this hash as last read, whatever
// the cluster epoch since: for a call whose own store statement checks the credential again
// (store.Heartbeat.Credential). False when no entry holds it.
func (c *CredentialCache) Cached(hash string) (store.Cluster, bool) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[hash]
	if !ok {
		return store.Cluster{}, false
	}
	c.lookups++
	e.lastUsed = now
	return e.cluster, true
}

// credentialFacts is the part of a cluster an entry keeps.
func credentialFacts(c store.Cluster) store.Cluster {
	return store.Cluster{Name: c.Name, Revoked: c.Revoked, CredentialHash: c.CredentialHash,
		CredentialExpiresAt: c.CredentialExpiresAt, PreviousCredentialHash: c.PreviousCredentialHash,
		PreviousExpiresAt: c.PreviousExpiresAt}
}

// epoch reads the cluster epoch, or returns one read within maxAge.
func (c *CredentialCache) epoch(ctx context.Context, now time.Time, maxAge time.Duration) (int64, error) {
	if maxAge > 0 {
		c.mu.Lock()
		if !c.recentAt.IsZero() && now.Sub(c.recentAt) < maxAge {
			e := c.recent
			c.mu.Unlock()
			return e, nil
		}
		c.mu.Unlock()
	}
	e, err := c.freshEpoch(ctx)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	if e >= c.recent {
		c.recent, c.recentAt = e, now
	}
	c.mu.Unlock()
	return e, nil
}

// freshEpoch returns the cluster epoch as read by a query that began after the call: a change
// committed before the call is in it. Calls that arrive while a read is in flight do not wait
// for one each: they join the next read, which begins once the one in flight ends, so a burst
// of heartbeats (a rollout's wave) costs a round trip per read in flight, not per call.
func (c *CredentialCache) freshEpoch(ctx context.Context) (int64, error) {
	c.mu.Lock()
	r := c.pending
	first := r == nil
	if first {
		r = &epochRead{done: make(chan struct{})}
		c.pending = r
	}
	r.calls++
	c.mu.Unlock()
	if !first {
		select {
		case <-r.done:
			return r.epoch, r.err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	c.reading.Lock()
	c.mu.Lock()
	c.pending = nil // every call that joined r arrived before its query begins
	c.epochChecks++
	c.mu.Unlock()
	// The read serves other calls too: the first caller's cancellation must not end it.
	readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), epochReadTimeout)
	r.epoch, r.err = c.store.ClusterEpoch(readCtx)
	cancel()
	c.reading.Unlock()
	close(r.done)
	return r.epoch, r.err
}

// epochReadTimeout bounds a shared epoch read.
const epochReadTimeout = 30 * time.Second

// sweepLocked drops, at most once a minute, the entries no call used for unusedFor.
func (c *CredentialCache) sweepLocked(now time.Time) {
	if now.Sub(c.lastSweep) < time.Minute {
		return
	}
	c.lastSweep = now
	for h, e := range c.entries {
		if now.Sub(e.lastUsed) > unusedFor {
			delete(c.entries, h)
		}
	}
}

// CacheStats counts a CredentialCache's work: lookups, those that had to read the cluster
// from the store, cluster epoch reads, and reads of every cluster's credentials (Refresh).
type CacheStats struct {
	Lookups, StoreReads, EpochReads, Refreshes int64
}

// Stats returns the counts so far (kollect_hub_credential_lookups_total and its siblings).
func (c *CredentialCache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Lookups: c.lookups, StoreReads: c.storeReads, EpochReads: c.epochChecks, Refreshes: c.refreshes}
}
