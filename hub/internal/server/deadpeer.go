package server

import (
	"fmt"
	"net"
	"time"
)

// An agent can vanish without closing its connection: its node powered off, or a network on
// the way that drops the flow. Its stream would then hold the hub's resources for good. The
// kernel finds such a peer: every agent connection sends TCP keepalive probes once it has been
// quiet for deadPeerIdle, and is reset when deadPeerProbes of them, deadPeerInterval apart, go
// unanswered, or when data it sent stays unacknowledged for as long (TCP_USER_TIMEOUT, on
// Linux).
//
// HTTP/2 pings (http.HTTP2Config.SendPingTimeout) did this before, at the cost of a runtime
// timer per connection. The runtime scans every timer of its heap when a timer that was
// re-armed comes due, and the PostgreSQL driver re-arms one of its own around every statement
// (pgconn's slow-write timer, 15 ms): with 5,000 agents a replica, those scans were a fifth of
// its CPU at steady state (docs/performance.md). Keepalive probes cost the process nothing.
const (
	deadPeerIdle     = 30 * time.Second
	deadPeerInterval = 10 * time.Second
	deadPeerProbes   = 3
)

// deadPeerTimeout is how long an agent that vanished keeps its connection at most: the quiet
// time before the first probe and the unanswered probes after it.
const deadPeerTimeout = deadPeerIdle + deadPeerProbes*deadPeerInterval

// detectDeadPeer sets up the kernel's detection of a vanished peer on an accepted agent
// connection. Connections that are not TCP (a test's pipe) are left as they are.
func detectDeadPeer(c net.Conn) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	if err := tc.SetKeepAliveConfig(net.KeepAliveConfig{
		Enable: true, Idle: deadPeerIdle, Interval: deadPeerInterval, Count: deadPeerProbes,
	}); err != nil {
		return fmt.Errorf("setting TCP keepalive: %w", err)
	}
	return setUserTimeout(tc, deadPeerTimeout)
}
