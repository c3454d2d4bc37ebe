package ratelimit

import (
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestBucket(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	l := New(Limit{Burst: 3, Interval: 10 * time.Second}, clk.now)
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("call %d of the burst refused", i)
		}
	}
	ok, wait := l.Allow("a")
	if ok || wait != 10*time.Second {
		t.Fatalf("fourth call: ok=%v wait=%v, want refused for 10s", ok, wait)
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another address shares the bucket")
	}
	clk.t = clk.t.Add(4 * time.Second)
	if _, wait := l.Allow("a"); wait != 6*time.Second {
		t.Fatalf("after 4s the wait is %v, want 6s", wait)
	}
	clk.t = clk.t.Add(6 * time.Second)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("a token refilled after the interval was refused")
	}
}

func TestFailures(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	l := New(Limit{Burst: 2, Interval: time.Minute}, clk.now)
	if blocked, _ := l.Blocked("a"); blocked {
		t.Fatal("a new address is blocked")
	}
	if l.Take("a") {
		t.Fatal("the first failure emptied a bucket of 2")
	}
	if !l.Take("a") {
		t.Fatal("the second failure did not empty the bucket")
	}
	if blocked, wait := l.Blocked("a"); !blocked || wait != time.Minute {
		t.Fatalf("blocked=%v wait=%v after the burst of failures", blocked, wait)
	}
	if l.Take("a") {
		t.Fatal("an empty bucket reported emptied again")
	}
	clk.t = clk.t.Add(2 * time.Minute)
	if blocked, _ := l.Blocked("a"); blocked {
		t.Fatal("still blocked after the bucket refilled")
	}
	// A full bucket is forgotten by the sweep.
	clk.t = clk.t.Add(time.Hour)
	l.Blocked("b")
	if _, ok := l.buckets["a"]; ok {
		t.Error("a refilled bucket was kept")
	}
}

func TestDisabled(t *testing.T) {
	l := New(Limit{}, nil)
	for range 100 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatal("a disabled limit refused")
		}
		l.Take("a")
	}
	if blocked, _ := l.Blocked("a"); blocked {
		t.Fatal("a disabled limit blocked")
	}
}

func TestKey(t *testing.T) {
	// An IPv6 host holds its /64 whole: every address in it shares one budget.
	for in, want := range map[string]string{"127.0.0.1:4000": "127.0.0.1", "[::1]:80": "::/64", "pipe": "pipe",
		"[2001:db8:1:2::7]:443": "2001:db8:1:2::/64", "[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:3::7]:443": "2001:db8:1:3::/64", "[::ffff:10.0.0.1]:80": "10.0.0.1", "[fe80::1%eth0]:22": "fe80::/64"} {
		if got := Key(in); got != want {
			t.Errorf("Key(%q) = %q, want %q", in, got, want)
		}
	}
}
