package testenv

import (
	"net"
	"sync/atomic"
	"testing"
)

// CountingListener accepts TCP connections on 127.0.0.1 and counts them, closing each at
// once: the server-side evidence that a refused client never connected. It stops with t.
func CountingListener(t testing.TB) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().String(), accepted
}
