package fleetsim

import (
	"net/http"
	"sync"
)

// ConnectionPerAgent makes every agent of the fleet hold a TLS connection of its own to the
// hub, as agents in separate clusters do, instead of sharing the fleet's few HTTP/2
// connections: a benchmark of the hub then pays for one connection per agent (its TLS
// handshake, buffers and goroutines). Call it before the first Add; registrations, which
// carry no credential, still share one connection.
func (f *Fleet) ConnectionPerAgent() {
	base, ok := f.client.Transport.(*http.Transport)
	if !ok {
		return // already per agent
	}
	f.client.Transport = &perAgent{base: base, byCredential: map[string]*http.Transport{}}
}

// perAgent routes each request to the transport of the credential it carries (the
// Authorization header every authenticated agent call sets), creating it on first use.
type perAgent struct {
	base *http.Transport

	mu           sync.Mutex
	byCredential map[string]*http.Transport
}

func (p *perAgent) RoundTrip(req *http.Request) (*http.Response, error) {
	key := req.Header.Get("Authorization")
	if key == "" {
		return p.base.RoundTrip(req)
	}
	p.mu.Lock()
	t, ok := p.byCredential[key]
	if !ok {
		t = p.base.Clone()
		p.byCredential[key] = t
	}
	p.mu.Unlock()
	return t.RoundTrip(req)
}

// CloseIdleConnections closes every agent's idle connections (http.Client.CloseIdleConnections
// calls it from Fleet.Close).
func (p *perAgent) CloseIdleConnections() {
	p.base.CloseIdleConnections()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.byCredential {
		t.CloseIdleConnections()
	}
}
