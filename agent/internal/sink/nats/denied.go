package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"kollect.dev/agent/internal/sink"
)

// denials keeps the permissions violations the server reports on the connection. A publish
// or request to a subject the user may not publish to is dropped by the server, which says
// so only in an asynchronous -ERR: the client would wait for an acknowledgement or a reply
// that never comes, until the export's deadline, and report a timeout (transient). With a
// per-cluster user (docs/sinks/nats.md, "One writer per cluster") that is what an agent
// configured with another cluster's name meets, so the violation must end the operation at
// once and say why.
type denials struct {
	mu   sync.Mutex
	err  error         // the latest violation
	wake chan struct{} // closed, and replaced, at each violation
}

func newDenials() *denials { return &denials{wake: make(chan struct{})} }

// handler is the connection's asynchronous error callback.
func (d *denials) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	d.mu.Lock()
	d.err = err
	close(d.wake)
	d.wake = make(chan struct{})
	d.mu.Unlock()
}

// watch returns ctx cancelled, with the violation as its cause, when the server reports a
// permissions violation on the connection while the operation runs. The connection is the
// sink's own, so a violation during an operation is almost surely the operation's (another
// inventory's concurrent export with the same credentials may also meet it, and would fail
// the same way on its own). stop must be called when the operation ends.
func (d *denials) watch(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	d.mu.Lock()
	wake := d.wake
	d.mu.Unlock()
	go func() {
		select {
		case <-wake:
			d.mu.Lock()
			err := d.err
			d.mu.Unlock()
			cancel(err)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// explain replaces the error of an operation that ctx (from watch) ended by a permissions
// violation with that violation, terminal: retrying cannot help until the credentials, their
// permissions or the agent's cluster name change.
func (s *Sink) explain(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if !errors.Is(cause, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrPermissionViolation) {
		return err
	}
	return sink.TerminalError(fmt.Errorf("nats sink stream %s: the server refused a subject to the sink's user "+
		"(the credentials' permissions do not cover cluster %s, or they are another cluster's): %w (%v)",
		s.stream, s.cluster, cause, err))
}
