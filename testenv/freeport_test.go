package testenv

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortIsBelowTheEphemeralRangeAndHandedOutOnce(t *testing.T) {
	lo, hi := listenerPortRange()
	seen := map[int]bool{}
	for range 200 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < lo || port >= hi {
			t.Fatalf("port %d outside [%d, %d), where outgoing connections take no ports", port, lo, hi)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d not free: %v", port, err)
		}
		l.Close()
	}
}
