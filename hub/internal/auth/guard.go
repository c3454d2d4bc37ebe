package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"kollect.dev/hub/internal/ratelimit"
	"kollect.dev/hub/internal/store"
)

// AuditFailed is the audit action of a refused call (a failed authentication, or a role too
// low); AuditRateLimited that of an address whose failures reached the limit.
const (
	AuditFailed      = "AuthFailed"
	AuditRateLimited = "RateLimited"
)

// auditWindow is how often one kind of refusal (one actor, action and target) is audited: the
// first in a window is written at once, those after it are counted and written as one event
// when the window ends, so an attacker's loop costs the audit log one row a minute per kind,
// not one per call. maxAuditKinds bounds the kinds tracked at once; past it, refusals of a new
// kind are dropped (and counted as unaudited) until windows end.
const (
	auditWindow   = time.Minute
	maxAuditKinds = 10000
)

// auditKind is one kind of refusal within its window.
type auditKind struct {
	first      store.AuditEvent
	since      time.Time
	suppressed int64
}

// auditQueue is how many failure audit events may wait for the store. A refused call never
// waits for the store's write lock: its event is queued and written by Guard.Run, and when
// the queue is full (a flood from many addresses) the event is dropped and counted.
const auditQueue = 1024

// Guard throttles registrations and failed authentications per client address and logs and
// audits every refused call, never with the secret presented. One Guard serves every
// interceptor of a hub replica, so an address's failures count the same on every service.
type Guard struct {
	log                *slog.Logger
	st                 store.Store
	register, failures *ratelimit.Limiter
	queue              chan store.AuditEvent
	now                func() time.Time

	kindsMu sync.Mutex
	kinds   map[string]*auditKind

	failed, limited, dropped atomic.Int64
}

// NewGuard returns a guard; Run must run for its audit events to be written.
func NewGuard(st store.Store, log *slog.Logger, register, failures ratelimit.Limit, now func() time.Time) *Guard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	return &Guard{log: log, st: st, register: ratelimit.New(register, now), failures: ratelimit.New(failures, now),
		queue: make(chan store.AuditEvent, auditQueue), now: now, kinds: map[string]*auditKind{}}
}

// Now is the clock expiries are checked against.
func (g *Guard) Now() time.Time { return g.now() }

// Failures is how many calls were refused for their credential or role (this replica).
func (g *Guard) Failures() int64 { return g.failed.Load() }

// Limited is how many calls a rate limit refused (this replica).
func (g *Guard) Limited() int64 { return g.limited.Load() }

// Unaudited is how many refusals were not audited: the queue was full, or maxAuditKinds kinds
// were being counted.
func (g *Guard) Unaudited() int64 { return g.dropped.Load() }

// Run writes queued audit events until ctx ends, then writes what is still queued.
func (g *Guard) Run(ctx context.Context) {
	write := func(e store.AuditEvent) {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := g.st.AppendAudit(wctx, e); err != nil {
			g.log.ErrorContext(ctx, "writing the audit event of a refused call", "action", e.Action, "actor", e.Actor, "error", err)
		}
	}
	tick := time.NewTicker(auditWindow / 4)
	defer tick.Stop()
	for {
		select {
		case e := <-g.queue:
			write(e)
		case <-tick.C:
			for _, e := range g.endWindows(g.now(), false) {
				write(e)
			}
		case <-ctx.Done():
			for _, e := range g.endWindows(g.now(), true) {
				write(e)
			}
			for {
				select {
				case e := <-g.queue:
					write(e)
				default:
					return
				}
			}
		}
	}
}

// audit queues a refusal's event: the first of its kind in a window, or the summary of the
// window before it that counted more of that kind (see auditWindow).
func (g *Guard) audit(e store.AuditEvent) {
	now := g.now()
	e.Time = now.UTC()
	key := e.Actor + "\x00" + e.Action + "\x00" + e.Target
	g.kindsMu.Lock()
	k := g.kinds[key]
	switch {
	case k != nil && now.Sub(k.since) < auditWindow:
		k.suppressed++
		g.kindsMu.Unlock()
		return
	case k == nil && len(g.kinds) >= maxAuditKinds:
		g.kindsMu.Unlock()
		g.drop()
		return
	}
	var summary *store.AuditEvent
	if k != nil && k.suppressed > 0 {
		s := k.summary()
		summary = &s
	}
	g.kinds[key] = &auditKind{first: e, since: now}
	g.kindsMu.Unlock()
	if summary != nil {
		g.enqueue(*summary)
	}
	g.enqueue(e)
}

// summary is the event that stands for the refusals a window counted after its first.
func (k *auditKind) summary() store.AuditEvent {
	e := k.first
	e.Detail = fmt.Sprintf("%d more since %s, audited together: %s", k.suppressed, k.since.UTC().Format(time.RFC3339), k.first.Detail)
	return e
}

// endWindows forgets the kinds whose window ended by now (every kind with all) and returns the
// summaries of those that counted refusals after their first.
func (g *Guard) endWindows(now time.Time, all bool) []store.AuditEvent {
	g.kindsMu.Lock()
	defer g.kindsMu.Unlock()
	var out []store.AuditEvent
	for key, k := range g.kinds {
		if !all && now.Sub(k.since) < auditWindow {
			continue
		}
		if k.suppressed > 0 {
			s := k.summary()
			s.Time = now.UTC()
			out = append(out, s)
		}
		delete(g.kinds, key)
	}
	return out
}

func (g *Guard) enqueue(e store.AuditEvent) {
	select {
	case g.queue <- e:
	default:
		g.drop()
	}
}

func (g *Guard) drop() {
	if n := g.dropped.Add(1); n == 1 || n%1000 == 0 {
		g.log.Warn("audit queue full, or too many kinds of refusal at once: refused calls are logged but not audited", "unaudited", n)
	}
}

// exhausted is the ResourceExhausted error a limited call gets: it says when to retry, in
// words, as a google.rpc.RetryInfo detail and as a Retry-After header (whole seconds).
func exhausted(what string, wait time.Duration) error {
	wait = max(wait.Round(time.Second), time.Second)
	ce := connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%s; retry in %s", what, wait))
	if d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
		ce.AddDetail(d)
	}
	ce.Meta().Set("Retry-After", strconv.Itoa(int(wait/time.Second)))
	return ce
}

// RetryAfter is the wait an error of this package asks for (0 when it asks for none).
func RetryAfter(err error) time.Duration {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ri, ok := v.(*errdetails.RetryInfo); ok {
				return ri.GetRetryDelay().AsDuration()
			}
		}
	}
	return 0
}

// Reject is what a call whose authentication failed gets. From an address, or with a
// credential, whose failed authentications used up their budget it is ResourceExhausted (with
// when to retry), counted but not audited again; otherwise the failure is logged, audited and
// taken from both budgets (Refused) and err is returned. h holds the credential presented, if
// any. Credentials are verified first: a valid one is never refused for its address, so one
// attacker behind a shared address (a NAT, a passthrough Ingress) cannot lock the fleet out;
// and the credential's own budget stops a stolen or revoked one tried from many addresses.
func (g *Guard) Reject(ctx context.Context, procedure, peer string, h http.Header, err error) error {
	cred := failureKey(h)
	if connect.CodeOf(err) == connect.CodeUnauthenticated {
		if blocked := g.Blocked(peer, cred); blocked != nil {
			return blocked
		}
	}
	g.Refused(ctx, procedure, peer, cred, err)
	return err
}

// failureKey names the budget of the credential in h ("" without one): a prefix of its
// SHA-256, which says nothing of the secret and is the same on every hub replica.
func failureKey(h http.Header) string {
	secret, ok := bearer(h)
	if !ok {
		return ""
	}
	return "credential:" + Hash(secret)[:16]
}

// Blocked refuses a call from an address, or with a credential (its failureKey; "" for
// none), whose failed authentications used up its budget.
func (g *Guard) Blocked(peer, cred string) error {
	key := ratelimit.Key(peer)
	if blocked, wait := g.failures.Blocked(key); blocked {
		g.limited.Add(1)
		return exhausted("too many failed authentications from "+key, wait)
	}
	if cred == "" {
		return nil
	}
	if blocked, wait := g.failures.Blocked(cred); blocked {
		g.limited.Add(1)
		return exhausted("too many failed authentications with this credential", wait)
	}
	return nil
}

// AllowRegister takes one registration from the address's budget, or refuses the call.
func (g *Guard) AllowRegister(peer string) error {
	key := ratelimit.Key(peer)
	if ok, wait := g.register.Allow(key); !ok {
		g.limited.Add(1)
		return exhausted("too many registrations from "+key, wait)
	}
	return nil
}

// Refused logs and audits a refused call: the caller's address, the procedure and why, never
// the secret presented. An unauthenticated call also takes one failure from the address's
// budget and from the presented credential's (cred, its failureKey; "" for none); the one
// that empties a budget is audited as RateLimited. Other errors (an unavailable store) are not
// the caller's fault and pass unrecorded.
func (g *Guard) Refused(ctx context.Context, procedure, peer, cred string, err error) {
	code := connect.CodeOf(err)
	if code != connect.CodeUnauthenticated && code != connect.CodePermissionDenied {
		return
	}
	g.failed.Add(1)
	key, name := ratelimit.Key(peer), procedureName(procedure)
	reason := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		reason = ce.Message()
	}
	g.log.WarnContext(ctx, "call refused", "procedure", name, "peer", peer, "code", code.String(), "reason", reason)
	g.audit(store.AuditEvent{Actor: "peer:" + key, Action: AuditFailed, Target: "procedure/" + name,
		Detail: code.String() + ": " + reason})
	if code != connect.CodeUnauthenticated {
		return
	}
	if g.failures.Take(key) {
		g.log.WarnContext(ctx, "failed authentications from this address reached the limit: its calls are refused for a while",
			"peer", key)
		g.audit(store.AuditEvent{Actor: "peer:" + key, Action: AuditRateLimited, Target: "peer/" + key,
			Detail: "failed authentications reached the limit; calls from this address are refused until the budget refills"})
	}
	if cred != "" && g.failures.Take(cred) {
		g.log.WarnContext(ctx, "failed authentications with one credential reached the limit: it is refused for a while, from every address",
			"credential", cred, "peer", key)
		g.audit(store.AuditEvent{Actor: "peer:" + key, Action: AuditRateLimited, Target: cred,
			Detail: "failed authentications with this credential reached the limit; it is refused from every address until the budget refills"})
	}
}
