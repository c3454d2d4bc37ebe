package ratelimit

import (
	"math"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Limit is a token bucket: Burst calls at once, then one more per Interval. A Burst below 1
// disables the limit.
type Limit struct {
	Burst    int
	Interval time.Duration
}

// Enabled reports whether the limit refuses anything.
func (l Limit) Enabled() bool { return l.Burst > 0 && l.Interval > 0 }

// Limiter keeps one bucket per key (a client address). It is safe for concurrent use.
type Limiter struct {
	limit Limit
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

// New returns a limiter; now is the clock (time.Now when nil).
func New(l Limit, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{limit: l, now: now, buckets: map[string]*bucket{}}
}

// refill brings key's bucket up to date and returns it; the caller holds mu.
func (l *Limiter) refill(key string, now time.Time) *bucket {
	l.sweep(now)
	b, ok := l.buckets[key]
	if !ok {
		b = &bucket{tokens: float64(l.limit.Burst), at: now}
		l.buckets[key] = b
		return b
	}
	if elapsed := now.Sub(b.at); elapsed > 0 {
		b.tokens = math.Min(float64(l.limit.Burst), b.tokens+float64(elapsed)/float64(l.limit.Interval))
		b.at = now
	}
	return b
}

// sweep forgets buckets that are full again, at most once per minute, so that the map holds
// only addresses seen recently however many addresses call.
func (l *Limiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	full := time.Duration(l.limit.Burst) * l.limit.Interval
	for k, b := range l.buckets {
		if now.Sub(b.at) >= full {
			delete(l.buckets, k)
		}
	}
}

// wait is how long until the bucket holds a whole token again.
func (l *Limiter) wait(b *bucket) time.Duration {
	missing := 1 - b.tokens
	if missing <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(missing * float64(l.limit.Interval)))
}

// Allow takes one token from key's bucket. When none is left it takes nothing and returns
// false with the time until one is.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	if !l.limit.Enabled() {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refill(key, l.now())
	if b.tokens < 1 {
		return false, l.wait(b)
	}
	b.tokens--
	return true, 0
}

// Blocked reports, taking nothing, whether key's bucket is empty, and for how long.
func (l *Limiter) Blocked(key string) (bool, time.Duration) {
	if !l.limit.Enabled() {
		return false, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refill(key, l.now())
	if b.tokens < 1 {
		return true, l.wait(b)
	}
	return false, 0
}

// Take takes one token from key's bucket if there is one (a failure that happened) and
// reports whether the bucket is now empty: the call that makes it so is the last one let
// through.
func (l *Limiter) Take(key string) (emptied bool) {
	if !l.limit.Enabled() {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refill(key, l.now())
	if b.tokens >= 1 {
		b.tokens--
		return b.tokens < 1
	}
	return false
}

// Key is the client a peer address counts for: its IPv4 address ("ip:port" → "ip"), or its
// IPv6 /64 ("2001:db8:1:2::/64"), which one host usually holds whole (one address per call
// would give it a fresh budget each time); anything unparsable is its own key.
func Key(addr string) string {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if ip = ip.Unmap(); ip.Is6() {
		return netip.PrefixFrom(ip.WithZone(""), 64).Masked().String()
	}
	return ip.String()
}
