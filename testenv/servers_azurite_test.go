package testenv

import (
	"net/http"
	"strings"
	"testing"
)

// TestAzuriteServesBlobsToAnAccountSAS: the emulator (a stand-in for Azure Blob Storage)
// accepts the account signatures AccountSAS mints, over HTTP and HTTPS, with the development
// account and with a custom one, and refuses a request without one.
func TestAzuriteServesBlobsToAnAccountSAS(t *testing.T) {
	for _, opts := range []AzuriteOptions{{}, {Account: "fleetlake", Key: "a2V5LW9mLWEtY3VzdG9tLWFjY291bnQ=", TLS: true}} {
		a, err := StartAzuriteWith(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Stop()
		if err := a.CreateContainer("probe"); err != nil {
			t.Fatal(err)
		}
		st, body, _, err := a.Do(http.MethodPut, "/probe/hello.txt", strings.NewReader("hi"), http.Header{"X-Ms-Blob-Type": {"BlockBlob"}})
		if err != nil || st != http.StatusCreated {
			t.Fatalf("%s: put blob: %d %s %v", a.Endpoint, st, body, err)
		}
		st, body, _, err = a.Do(http.MethodGet, "/probe/hello.txt", nil, nil)
		if err != nil || st != http.StatusOK || string(body) != "hi" {
			t.Fatalf("%s: get blob: %d %q %v", a.Endpoint, st, body, err)
		}
		if !strings.HasSuffix(a.Endpoint, "/"+a.Account) || (opts.TLS != strings.HasPrefix(a.Endpoint, "https://")) {
			t.Fatalf("endpoint %s", a.Endpoint)
		}
		if opts.TLS {
			continue // the test's client trusts the CA only through Do
		}
		resp, err := http.Get(a.Endpoint + "/probe/hello.txt")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("an unsigned request was served")
		}
	}
}
