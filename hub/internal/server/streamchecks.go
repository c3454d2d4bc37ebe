package server

import (
	"context"
	"maps"
	"sync"
	"time"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/auth"
	"kollect.dev/hub/internal/dispatch"
)

// streamChecks ends the open WatchConfig streams whose credential stopped working through
// another replica (revoked, replaced, deleted, expired, or rotated and past its grace); this
// replica ends its own at once (Dispatcher.Disconnect). One pass every CredentialRecheck
// checks every stream the replica holds, on one goroutine: a timer and a wake-up per stream
// cost a replica of 5,000 agents 170 goroutine wake-ups a second and a timer heap of 5,000
// entries, which the runtime scans whenever a timer moves earlier.
type streamChecks struct {
	creds *auth.CredentialCache
	now   func() time.Time

	mu      sync.Mutex
	streams map[*dispatch.Conn]string // the credential each stream was opened with
}

func newStreamChecks(creds *auth.CredentialCache, now func() time.Time) *streamChecks {
	return &streamChecks{creds: creds, now: now, streams: map[*dispatch.Conn]string{}}
}

// add checks c, opened with credential, until the returned function is called.
func (s *streamChecks) add(c *dispatch.Conn, credential string) (remove func()) {
	s.mu.Lock()
	s.streams[c] = credential
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.streams, c)
		s.mu.Unlock()
	}
}

// run checks every stream each interval until ctx ends.
func (s *streamChecks) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.check(ctx)
		}
	}
}

// check ends each stream whose credential no longer works. The credentials are looked up
// against a cluster epoch read at most a second before (one read serves the whole pass),
// after the cache was brought up to it in one read when registrations moved it; a store that
// cannot answer ends nothing: the next pass tries again.
func (s *streamChecks) check(ctx context.Context) {
	_ = s.creds.Refresh(ctx) // on failure the lookups below read what they need, or fail too
	s.mu.Lock()
	streams := maps.Clone(s.streams)
	s.mu.Unlock()
	now := s.now()
	for c, cred := range streams {
		if _, err := s.creds.Verify(ctx, cred, time.Second, now); connect.CodeOf(err) == connect.CodeUnauthenticated {
			c.End(err)
		}
		if ctx.Err() != nil {
			return
		}
	}
}
