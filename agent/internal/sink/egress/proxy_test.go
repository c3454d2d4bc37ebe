package egress

import (
	"net/http"
	"net/url"
	"testing"
)

// TestProxiedDestinationsAreCheckedAfterResolution: through an HTTP(S)_PROXY the agent never
// dials the destination, so the dial-time checks would see only the proxy. The transport's
// proxy function resolves the destination and refuses it as a dial would — a name that
// resolves to loopback here — and hands allowed destinations to the proxy.
func TestProxiedDestinationsAreCheckedAfterResolution(t *testing.T) {
	proxy, _ := url.Parse("http://192.0.2.1:3128") // never dialled: only returned
	orig := proxyFromEnvironment
	proxyFromEnvironment = func(*http.Request) (*url.URL, error) { return proxy, nil }
	t.Cleanup(func() { proxyFromEnvironment = orig })

	for name, tr := range map[string]*http.Transport{"Transport": New(Policy{}).Transport(), "ContextTransport": ContextTransport(New(Policy{}))} {
		ask := func(target string) (*url.URL, error) {
			req, err := http.NewRequest(http.MethodGet, target, nil)
			if err != nil {
				t.Fatal(err)
			}
			return tr.Proxy(req)
		}
		// localhost passes the name check (it is not a literal address) and resolves to loopback.
		if got, err := ask("http://localhost:9000/bucket"); !IsRefused(err) {
			t.Errorf("%s: a name resolving to loopback went to the proxy: %v %v", name, got, err)
		}
		if got, err := ask("http://169.254.169.254/latest/meta-data"); !IsRefused(err) {
			t.Errorf("%s: the metadata address went to the proxy: %v %v", name, got, err)
		}
		// The positive control: an allowed destination goes through the proxy.
		if got, err := ask("https://192.0.2.10/bucket"); err != nil || got.String() != proxy.String() {
			t.Errorf("%s: an allowed destination: %v %v, want the proxy", name, got, err)
		}
	}
}
