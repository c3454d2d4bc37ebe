package hubdial

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestFailover: a client given two replicas' URLs (one comma-separated value) talks to one
// of them; when that replica goes away, the next call dials the other at once and succeeds,
// and the client stays there.
func TestFailover(t *testing.T) {
	c := newCA(t, "hub CA")
	cert := c.leaf(t, []string{"127.0.0.1"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	portA, hubA, srvA := serveServer(t, cert)
	portB, hubB, srvB := serveServer(t, cert)
	urls := "https://127.0.0.1:" + portA + ", https://127.0.0.1:" + portB
	conn, err := New(Options{URL: urls, CAFingerprint: c.pin(), Token: func() string { return "s3cret" }})
	if err != nil {
		t.Fatal(err)
	}
	agent := conn.Agent()
	ctx := context.Background()
	call := func() error {
		_, err := agent.ReportStatus(ctx, connect.NewRequest(&fleetv1.ReportStatusRequest{}))
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	first := conn.Current()
	dead, live, liveHub := srvA, "127.0.0.1:"+portB, hubB
	if first == live {
		dead, live, liveHub = srvB, "127.0.0.1:"+portA, hubA
	}
	liveHub.auth.Store("")
	dead.Close() // its listener and open connections: refused from now on

	// The call that finds the connection gone may fail (it was sent on it); the next one
	// redials and reaches the other replica without any delay of its own.
	if err := call(); err != nil {
		if err := call(); err != nil {
			t.Fatalf("after %s went away: %v", first, err)
		}
	}
	if got := conn.Current(); got != live {
		t.Fatalf("connected to %s, want %s", got, live)
	}
	if got := liveHub.auth.Load(); got != "Bearer s3cret" {
		t.Fatalf("the surviving replica saw Authorization %q", got)
	}
	for range 3 {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	if got := conn.Current(); got != live {
		t.Fatalf("moved to %s with nothing wrong", got)
	}
}

// TestFailoverAllDown: with every replica refusing, a call fails at once naming each.
func TestFailoverAllDown(t *testing.T) {
	c := newCA(t, "hub CA")
	conn, err := New(Options{URLs: []string{"https://127.0.0.1:1", "https://127.0.0.1:2"}, CAFingerprint: c.pin()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Agent().ReportStatus(context.Background(), connect.NewRequest(&fleetv1.ReportStatusRequest{}))
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "127.0.0.1:2") {
		t.Fatalf("err = %v, want both replicas named", err)
	}
}

func TestSplitURLs(t *testing.T) {
	got := SplitURLs(" https://a:1,https://b:2,, https://a:1 ")
	if strings.Join(got, " ") != "https://a:1 https://b:2" {
		t.Fatalf("SplitURLs = %q", got)
	}
	if _, err := New(Options{URL: "https://a:1/x,https://b:2/y"}); err == nil {
		t.Fatal("URLs with different paths accepted")
	}
}
