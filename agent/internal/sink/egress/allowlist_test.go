package egress

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"kollect.dev/testenv"
)

func TestAllowlistsBeforeResolution(t *testing.T) {
	corp := Allowlist{Source: "KollectClusterScope platform", Hosts: []string{"*.corp.example", "db.example.com"}}
	nets := Allowlist{Source: "KollectScope team-a/limits", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}}
	for _, tc := range []struct {
		name  string
		lists []Allowlist
		host  string
		rule  string // "" when allowed (before resolution)
	}{
		{"host glob", []Allowlist{corp}, "pg.corp.example", ""},
		{"host name, any case", []Allowlist{corp}, "DB.Example.COM.", ""},
		{"host outside", []Allowlist{corp}, "pg.elsewhere.example", corp.Rule()},
		{"address outside a host-only list", []Allowlist{corp}, "10.20.1.1", corp.Rule()},
		{"address inside", []Allowlist{nets}, "10.20.1.1", ""},
		{"address outside", []Allowlist{nets}, "10.21.1.1", nets.Rule()},
		{"a name waits for its addresses", []Allowlist{nets}, "pg.elsewhere.example", ""},
		{"every list must allow: the namespace's narrows the cluster's", []Allowlist{corp, nets}, "10.20.1.1", corp.Rule()},
	} {
		err := New(Policy{}).Restrict(tc.lists...).CheckHost(tc.host)
		var r *RefusedError
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("%s: %s refused: %v", tc.name, tc.host, err)
		case tc.rule != "" && (!asRefused(err, &r) || r.Rule != tc.rule):
			t.Errorf("%s: %s: %v, want %q", tc.name, tc.host, err, tc.rule)
		}
	}
	if got, want := (Allowlist{Source: "KollectScope a/b", Hosts: []string{"*.x"}, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}).Rule(),
		"KollectScope a/b allows sinks to reach only hosts *.x or addresses in 10.0.0.0/8"; got != want {
		t.Errorf("Rule() = %q, want %q", got, want)
	}
}

func asRefused(err error, r **RefusedError) bool {
	re, ok := err.(*RefusedError)
	*r = re
	return ok
}

// A name's resolved addresses are checked at connect time, before the connection: a listener
// outside the list accepts nothing, whatever name reached it; inside, the dial connects.
func TestAllowlistsAfterResolution(t *testing.T) {
	addr, accepted := testenv.CountingListener(t)
	_, port, _ := net.SplitHostPort(addr)
	local := New(Policy{AllowLocal: true})
	elsewhere := Allowlist{Source: "KollectClusterScope platform", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	byName := Allowlist{Source: "KollectScope team-a/limits", Hosts: []string{"localhost"}}
	refused := local.Restrict(elsewhere)
	for _, dial := range []func() error{
		func() error {
			_, err := refused.DialContext(context.Background(), "tcp", "localhost:"+port)
			return err
		},
		func() error { _, err := refused.Dial("tcp", addr); return err },
		func() error {
			_, err := refused.Dialer().DialContext(context.Background(), "tcp", addr)
			return err
		},
		func() error {
			resp, err := (&http.Client{Transport: refused.Transport()}).Get("http://localhost:" + port + "/")
			if err == nil {
				resp.Body.Close()
			}
			return err
		},
		func() error { return refused.CheckResolved("localhost", netip.MustParseAddr("127.0.0.1")) },
	} {
		if err := dial(); !IsRefused(err) || !strings.Contains(err.Error(), elsewhere.Rule()) {
			t.Errorf("dial outside the list: %v, want %q", err, elsewhere.Rule())
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the listener accepted %d connections the allowlist refused", n)
	}
	// Allowed by name ("localhost"), or by the address range: the dial connects.
	for _, g := range []*Guard{local.Restrict(byName), local.Restrict(Allowlist{Source: "s", Prefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})} {
		c, err := g.DialContext(context.Background(), "tcp", "localhost:"+port)
		if err != nil {
			t.Fatalf("dial inside the list: %v", err)
		}
		c.Close()
	}
}

// A process-wide client (go-git's) dials through the guard of each request's context, and
// guards that differ never share a pooled connection.
func TestContextTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer srv.Close()
	local := New(Policy{AllowLocal: true})
	client := &http.Client{Transport: ContextTransport(local)}
	get := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(context.Background()); err != nil {
		t.Fatalf("fallback guard: %v", err)
	}
	if err := get(NewContext(context.Background(), local)); err != nil {
		t.Fatalf("a sink's guard that allows it: %v", err)
	}
	narrow := local.Restrict(Allowlist{Source: "KollectScope team-a/limits", Hosts: []string{"git.corp.example"}})
	if err := get(NewContext(context.Background(), narrow)); !IsRefused(err) {
		t.Fatalf("a sink's guard that refuses it, after another sink's connection to the same server: %v", err)
	}
}
