package server

import (
	"crypto/tls"
	"log/slog"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAgentConnectionsDetectDeadPeers reads, from the hub's side of an accepted connection,
// the socket options that make the kernel reset a connection whose agent vanished: keepalive
// probes after 30 s of quiet, three of them 10 s apart, and the same minute for data left
// unacknowledged.
func TestAgentConnectionsDetectDeadPeers(t *testing.T) {
	t.Parallel()
	cert, pool := selfSigned(t)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newHandshakeListener(raw, &tls.Config{Certificates: []tls.Certificate{cert}}, 5*time.Second, slog.New(slog.DiscardHandler))
	defer ln.Close()
	go func() {
		if c, err := tls.Dial("tcp", raw.Addr().String(), &tls.Config{RootCAs: pool}); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1)) // until the test closes its side
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, ok := c.(*tls.Conn).NetConn().(*net.TCPConn)
	if !ok {
		t.Fatalf("accepted %T over %T, want TCP", c, c.(*tls.Conn).NetConn())
	}
	sc, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name       string
		level, opt int
		value      int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE (s)", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 30},
		{"TCP_KEEPINTVL (s)", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 10},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 3},
		{"TCP_USER_TIMEOUT (ms)", unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, 60000},
	}
	for _, w := range want {
		var got int
		var gerr error
		if err := sc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), w.level, w.opt) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil {
			t.Fatalf("%s: %v", w.name, gerr)
		}
		if got != w.value {
			t.Errorf("%s = %d, want %d", w.name, got, w.value)
		}
	}
}
