//go:build !linux

package server

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not available: keepalive probes
// still find a vanished agent whose connection has nothing in flight.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
