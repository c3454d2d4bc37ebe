package nats

import "sync"

// lastError keeps the error of the latest failed connection attempt. The client retries in
// the background and clears its own LastError after a failed dial, so without it a probe of
// an unreachable server could only say that its deadline passed, not why.
type lastError struct {
	mu  sync.Mutex
	err error
}

func (l *lastError) set(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

func (l *lastError) get() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// connectError is why the sink is not connected: the client's last error (a refusal by the
// server, such as an authorization violation) or else the last failed dial.
func (s *Sink) connectError() error {
	if err := s.nc.LastError(); err != nil {
		return err
	}
	return s.dial.get()
}
