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
// HTTP/2 pings (http.HTTP2Config.SendPingTimeout) did this before. They cost each connection a
// runtime timer that every frame read and every ping re-arms, and the runtime scans its whole
// timer heap whenever a modified timer comes due: with 5,000 agents a replica and the
// PostgreSQL driver re-arming a timer of its own on every statement (pgconn's slow-write
// timer, 15 ms), those scans were a fifth of a replica's CPU at steady state
// (docs/performance.md). Keepalive probes cost the process nothing.
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
