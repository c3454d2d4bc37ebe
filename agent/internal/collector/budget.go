package collector

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Budgets hold each profile to a share of the agent's CPU on the shared watch of its kind.
//
// Why: a kind's watch is shared by every tenant's targets and its transform runs serially, so
// CPU one profile spends is time every other profile of that kind waits. Selection before
// extraction (see transform) keeps a profile to the objects its targets select; the budget
// bounds what it may spend on those. Each CEL evaluation is already bounded by the
// per-evaluation cost limit (expr.CostLimit); on top of it every profile has a token bucket of
// CEL cost units — its attributes and the match expressions of the targets that use it — that
// refills at Rate per second up to Burst. Cost units, not measured CPU time, so that a
// decision does not depend on how busy the node is, and a test or a second replica reaches the
// same one. A profile that empties its bucket is quarantined: it is no longer evaluated, its
// targets report BudgetExceeded and their inventories keep the rows they last had. The
// quarantine belongs to the profile's generation: a new generation (any edit of the spec), a
// re-created profile or a restart of the agent starts with a full bucket.
type BudgetOptions struct {
	// Rate is the sustained cost per second a profile may spend (CEL cost units, about 120 ns
	// of CPU each in comprehension-heavy expressions); 0 disables budgets.
	Rate float64
	// Burst is what a profile may spend at once: an initial list, a mass update. A profile
	// starts with a full bucket.
	Burst float64
}

// DefaultBudget is kollect-agent's default: 1M units per second (about an eighth of a core
// sustained) and a burst of 100M (about 12 s of one core), which lists of 100,000 objects with
// profiles of a few hundred units each fit in.
var DefaultBudget = BudgetOptions{Rate: 1_000_000, Burst: 100_000_000}

// budget is one profile generation's token bucket. Transforms of several informers may charge
// it at once.
type budget struct {
	profile string // the profile key, namespace/name@generation/uid
	opts    BudgetOptions
	now     func() time.Time

	mu       sync.Mutex
	tokens   float64
	last     time.Time
	spent    uint64 // every unit charged, for the message
	tripped  atomic.Bool
	trippedM string
}

func newBudget(profile string, o BudgetOptions, now func() time.Time) *budget {
	return &budget{profile: profile, opts: o, now: now, tokens: o.Burst, last: now()}
}

// charge spends cost and reports whether this charge quarantined the profile.
func (b *budget) charge(cost uint64) bool {
	if b == nil || b.opts.Rate <= 0 || b.tripped.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.tokens = min(b.opts.Burst, b.tokens+now.Sub(b.last).Seconds()*b.opts.Rate)
	b.last = now
	b.tokens -= float64(cost)
	b.spent += cost
	if b.tokens >= 0 || b.tripped.Load() {
		return false
	}
	b.trippedM = fmt.Sprintf("KollectProfile %s is quarantined on this agent: it spent %d CEL cost units, over its budget "+
		"(a burst of %.0f units refilled at %.0f per second: kollect-agent --profile-cost-burst and --profile-cost-rate); it is no "+
		"longer evaluated and its targets keep the rows they last had; a new generation of the profile lifts the quarantine",
		profileName(b.profile), b.spent, b.opts.Burst, b.opts.Rate)
	b.tripped.Store(true)
	return true
}

func (b *budget) isTripped() bool { return b != nil && b.tripped.Load() }

// quarantined reports whether the profile is quarantined, with the message saying why.
func (b *budget) quarantined() (string, bool) {
	if b == nil || !b.tripped.Load() {
		return "", false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.trippedM, true
}

// QuarantineError is the state of a target whose profile is quarantined.
type QuarantineError struct {
	// Profile is namespace/name of the KollectProfile.
	Profile string
	Message string
}

func (e *QuarantineError) Error() string { return e.Message }

// profileName is namespace/name of a profile key (namespace/name@generation/uid).
func profileName(key string) string {
	name, _, _ := strings.Cut(key, "@")
	return name
}

// BehindOptions say when a watch is behind: its transform was busy at least Threshold of the
// last Window. Then events arrive faster than the agent projects them (they queue in the watch
// stream, out of the agent's sight), and what its inventories hold is older than it looks.
type BehindOptions struct {
	Window    time.Duration
	Threshold float64
}

// DefaultBehind calls a watch behind when its transform was busy 90% of the last 10 seconds.
var DefaultBehind = BehindOptions{Window: 10 * time.Second, Threshold: 0.9}

// busyMeter measures the share of time one informer's transform is busy, over two tumbling
// halves of the window: the last complete half and the current one.
type busyMeter struct {
	opts BehindOptions
	now  func() time.Time

	mu         sync.Mutex
	slotStart  time.Time
	cur, prev  time.Duration // busy time in the current and the previous half
	prevLength time.Duration // length of the previous half, 0 before there is one
}

func newBusyMeter(o BehindOptions, now func() time.Time) *busyMeter {
	return &busyMeter{opts: o, now: now, slotStart: now()}
}

// add records d of transform time that ended now.
func (m *busyMeter) add(d time.Duration) {
	if m.opts.Window <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollLocked(m.now())
	m.cur += d
}

func (m *busyMeter) rollLocked(now time.Time) {
	half := m.opts.Window / 2
	for now.Sub(m.slotStart) >= half {
		m.prev, m.prevLength, m.cur = m.cur, half, 0
		m.slotStart = m.slotStart.Add(half)
		if now.Sub(m.slotStart) >= half { // idle for a whole half or more
			m.prev, m.cur = 0, 0
			m.slotStart = now
		}
	}
}

// busy returns the share of the window the transform was busy, and whether that is behind.
// A window not yet half over is not judged.
func (m *busyMeter) busy() (float64, bool) {
	if m == nil || m.opts.Window <= 0 {
		return 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.rollLocked(now)
	span := m.prevLength + now.Sub(m.slotStart)
	if m.prevLength == 0 || span <= 0 {
		return 0, false
	}
	f := float64(m.prev+m.cur) / float64(span)
	return f, f >= m.opts.Threshold
}
