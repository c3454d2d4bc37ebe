package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// handshakeListener completes each connection's TLS handshake on a goroutine of its own and
// only then hands the connection to net/http.
//
// Why: net/http runs the handshake on the goroutine that goes on to serve the connection for
// its whole life, and an agent's connection lives for days. The handshake's crypto grows that
// goroutine's stack, and the runtime gives back only part of it later; with one connection
// per agent that is a few KiB of stack per agent for as long as it stays connected. Here the
// goroutine that handshakes ends, and its stack with it.
type handshakeListener struct {
	net.Listener
	config  *tls.Config
	timeout time.Duration
	log     *slog.Logger

	ready     chan net.Conn
	failed    chan error
	done      chan struct{}
	closeOnce sync.Once
}

// newHandshakeListener serves ln with TLS config; a client that has not finished its
// handshake after timeout is dropped. Each connection is set up to detect a vanished peer
// (detectDeadPeer) first.
func newHandshakeListener(ln net.Listener, config *tls.Config, timeout time.Duration, log *slog.Logger) *handshakeListener {
	l := &handshakeListener{Listener: ln, config: config, timeout: timeout, log: log,
		ready: make(chan net.Conn), failed: make(chan error, 1), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

func (l *handshakeListener) acceptLoop() {
	var delay time.Duration
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() { // e.g. out of file descriptors: retry, as net/http does
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-l.done:
					return
				}
			}
			l.failed <- err
			return
		}
		delay = 0
		go l.handshake(raw)
	}
}

func (l *handshakeListener) handshake(raw net.Conn) {
	if err := detectDeadPeer(raw); err != nil {
		// Served all the same: only a peer that vanishes without closing would outstay.
		l.log.Warn("agent connection without dead-peer detection", "remote", raw.RemoteAddr().String(), "error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	conn := tls.Server(raw, l.config)
	if err := conn.HandshakeContext(ctx); err != nil {
		// net/http would log this at debug level and close; a scanner or a client with the
		// wrong CA pin is not the hub's problem.
		_ = raw.Close()
		return
	}
	select {
	case l.ready <- conn:
	case <-l.done:
		_ = conn.Close()
	}
}

// Accept returns the next connection whose handshake completed.
func (l *handshakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case err := <-l.failed:
		l.failed <- err // every later Accept fails the same way
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections already handed out are net/http's.
func (l *handshakeListener) Close() error {
	err := net.ErrClosed
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.Listener.Close()
	})
	return err
}
