package auth

import (
	"context"
	"fmt"

	"kollect.dev/hub/internal/store"
)

// staleForRefresh is how many entries older than the cluster epoch make one read of every
// cluster's credentials cheaper than reading their clusters one by one.
const staleForRefresh = 32

// Refresh brings the entries up to the current cluster epoch with one read of every
// cluster's credentials, when more than staleForRefresh of them are older than it. Any
// registration in the fleet moves the epoch; without a refresh, the next check of every
// cached credential (a replica checks all its open streams every CredentialRecheck) read its
// cluster again, a round trip each: 5,000 of them on a replica of 5,000 agents.
func (c *CredentialCache) Refresh(ctx context.Context) error {
	epoch, err := c.freshEpoch(ctx)
	if err != nil {
		return err
	}
	now := c.now()
	c.mu.Lock()
	if epoch >= c.recent {
		c.recent, c.recentAt = epoch, now
	}
	stale := 0
	for _, e := range c.entries {
		if e.epoch < epoch {
			stale++
		}
	}
	c.mu.Unlock()
	if stale <= staleForRefresh {
		return nil
	}
	// Read after the epoch, as lookup does: a change committed after the epoch read moves the
	// epoch past the one stamped here, so its entries are read again.
	clusters, err := c.store.ClusterCredentials(ctx)
	if err != nil {
		return fmt.Errorf("refreshing the credential cache: %w", err)
	}
	holder := make(map[string]store.Cluster, len(clusters))
	for _, cl := range clusters { // as ClusterByCredential: a current credential before a previous one
		if cl.PreviousCredentialHash != "" {
			holder[cl.PreviousCredentialHash] = cl
		}
	}
	for _, cl := range clusters {
		if cl.CredentialHash != "" {
			holder[cl.CredentialHash] = cl
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshes++
	for hash, e := range c.entries {
		if e.epoch >= epoch {
			continue // read by a lookup since, at least as new
		}
		if cl, ok := holder[hash]; ok {
			e.cluster, e.epoch = credentialFacts(cl), epoch
		} else {
			delete(c.entries, hash) // no cluster holds it: its next lookup says so
		}
	}
	return nil
}
