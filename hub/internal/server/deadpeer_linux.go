package server

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout bounds how long data the hub sent may stay unacknowledged before the kernel
// resets the connection: keepalive probes only start on a connection with nothing in flight,
// so without it a stream update sent to a vanished agent would keep retransmitting for about
// fifteen minutes.
func setUserTimeout(tc *net.TCPConn, d time.Duration) error {
	raw, err := tc.SyscallConn()
	if err != nil {
		return fmt.Errorf("setting TCP_USER_TIMEOUT: %w", err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	}); err != nil || serr != nil {
		return fmt.Errorf("setting TCP_USER_TIMEOUT: %w", errors.Join(err, serr))
	}
	return nil
}
