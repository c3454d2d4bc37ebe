package hubdial

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
)

// endpoint is one replica's URL: where to dial and the TLS configuration that verifies it.
type endpoint struct {
	host string // as in the URL, for the Host header
	addr string // host:port to dial
	tls  *tls.Config
}

// dialer connects to the first replica that answers, starting with the one the last
// connection reached: a connection refused, a failed handshake or a dial timeout moves on to
// the next URL at once, so an agent whose replica died is on another one as soon as it
// redials. It stays there (no flapping back when the first replica returns). A host name that
// resolves to several addresses is tried address by address by net.Dialer itself.
type dialer struct {
	eps []endpoint
	net *net.Dialer
	cur atomic.Int32
}

func (d *dialer) current() endpoint { return d.eps[int(d.cur.Load())%len(d.eps)] }

func (d *dialer) dial(ctx context.Context) (net.Conn, error) {
	start := int(d.cur.Load())
	var errs []error
	for i := range d.eps {
		idx := (start + i) % len(d.eps)
		ep := d.eps[idx]
		c, err := (&tls.Dialer{NetDialer: d.net, Config: ep.tls}).DialContext(ctx, "tcp", ep.addr)
		if err == nil {
			d.cur.Store(int32(idx))
			return c, nil
		}
		errs = append(errs, fmt.Errorf("hub %s: %w", ep.host, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// hostHeader names the replica the connection goes to in each request's Host (the
// :authority), for proxies that route by it. The request URL keeps the first replica's host:
// it is the connection pool's key, which makes every call share the one connection.
type hostHeader struct {
	d    *dialer
	next http.RoundTripper
}

func (h *hostHeader) RoundTrip(req *http.Request) (*http.Response, error) {
	if host := h.d.current().host; host != req.URL.Host {
		req = req.Clone(req.Context())
		req.Host = host
	}
	return h.next.RoundTrip(req)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the transport.
func (h *hostHeader) CloseIdleConnections() {
	if c, ok := h.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
