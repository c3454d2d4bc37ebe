package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"kollect.dev/testenv"
)

func TestCheckAddr(t *testing.T) {
	strict, local := New(Policy{}), New(Policy{AllowLocal: true})
	for _, tc := range []struct {
		addr          string
		strict, local string
	}{
		{"169.254.169.254", RuleLinkLocal, RuleLinkLocal},
		{"169.254.1.1", RuleLinkLocal, RuleLinkLocal},
		{"fe80::1", RuleLinkLocal, RuleLinkLocal},
		{"::ffff:169.254.169.254", RuleLinkLocal, RuleLinkLocal},
		{"fd00:ec2::254", RuleCloudMetadata, RuleCloudMetadata},
		{"100.100.100.200", RuleCloudMetadata, RuleCloudMetadata},
		{"224.0.0.1", RuleLinkLocal, RuleLinkLocal},
		{"239.1.1.1", RuleMulticast, RuleMulticast},
		{"127.0.0.1", RuleLoopback, ""},
		{"127.8.9.10", RuleLoopback, ""},
		{"::1", RuleLoopback, ""},
		{"::ffff:127.0.0.1", RuleLoopback, ""},
		{"0.0.0.0", RuleUnspecified, ""},
		{"::", RuleUnspecified, ""},
		{"10.0.0.5", "", ""},
		{"192.168.1.10", "", ""},
		{"203.0.113.7", "", ""},
		{"2001:db8::1", "", ""},
	} {
		ip := netip.MustParseAddr(tc.addr)
		if got := strict.CheckAddr(ip); got != tc.strict {
			t.Errorf("strict %s: %q, want %q", tc.addr, got, tc.strict)
		}
		if got := local.CheckAddr(ip); got != tc.local {
			t.Errorf("local %s: %q, want %q", tc.addr, got, tc.local)
		}
	}
	var zero *Guard
	if zero.CheckAddr(netip.MustParseAddr("127.0.0.1")) != RuleLoopback {
		t.Error("a nil guard must refuse loopback")
	}
}

func TestCheckURL(t *testing.T) {
	strict, local := New(Policy{}), New(Policy{AllowLocal: true})
	for _, tc := range []struct {
		url           string
		strict, local string
	}{
		{"file:///srv/git/inventory.git", RuleFileURL, ""},
		{"/srv/git/inventory.git", RuleFileURL, ""},
		{"http://metadata.google.internal/computeMetadata/v1/", RuleCloudMetadata, RuleCloudMetadata},
		{"https://METADATA.GOOGLE.INTERNAL./x", RuleCloudMetadata, RuleCloudMetadata},
		{"http://169.254.169.254/latest/meta-data/", RuleLinkLocal, RuleLinkLocal},
		{"https://user:s3cret@[::1]:8443/repo.git", RuleLoopback, ""},
		{"https://git.example.com/team/repo.git", "", ""},
	} {
		check := func(g *Guard, want string) {
			err := g.CheckURL(tc.url)
			var r *RefusedError
			switch {
			case want == "" && err != nil:
				t.Errorf("%s: %v, want allowed", tc.url, err)
			case want != "" && (!errors.As(err, &r) || r.Rule != want):
				t.Errorf("%s: %v, want %q", tc.url, err, want)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Errorf("%s: the refusal shows the URL's password: %v", tc.url, err)
			}
		}
		check(strict, tc.strict)
		check(local, tc.local)
	}
}

// A refused destination is refused before any connection: a listener on the refused
// address accepts nothing, and the error names the rule. Host names are checked after
// resolution: "localhost" resolves to loopback and is refused at connect time.
func TestDialRefusesBeforeConnecting(t *testing.T) {
	addr, accepted := testenv.CountingListener(t)
	_, port, _ := net.SplitHostPort(addr)
	strict := New(Policy{})
	for _, addr := range []string{addr, "localhost:" + port} {
		_, err := strict.DialContext(context.Background(), "tcp", addr)
		if !IsRefused(err) || !strings.Contains(err.Error(), RuleLoopback) {
			t.Errorf("dial %s: %v, want a loopback refusal", addr, err)
		}
	}
	// Through HTTP.
	resp, err := (&http.Client{Transport: strict.Transport()}).Get("http://" + addr + "/")
	if err == nil {
		resp.Body.Close()
	}
	if !IsRefused(err) {
		t.Errorf("HTTP GET: %v, want a refusal", err)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the listener accepted %d connections from a guard that refused them", n)
	}
	// The same dial with local destinations allowed connects: the listener was reachable.
	c, err := New(Policy{AllowLocal: true}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// A permitted first hop may not redirect to a refused one: each hop is dialed anew.
func TestRedirectToMetadataRefused(t *testing.T) {
	srv := httptest.NewServer(http.RedirectHandler("http://169.254.169.254/latest/meta-data/", http.StatusFound))
	defer srv.Close()
	resp, err := (&http.Client{Transport: New(Policy{AllowLocal: true}).Transport()}).Get(srv.URL)
	if err == nil {
		resp.Body.Close()
	}
	var r *RefusedError
	if !errors.As(err, &r) || r.Rule != RuleLinkLocal {
		t.Fatalf("redirect to the metadata address: %v, want a link-local refusal", err)
	}
}
