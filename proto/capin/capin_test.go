package capin

import (
	"strings"
	"testing"
)

// The connection checks themselves (wrong pin, wrong host, expired certificate) are tested
// through a real TLS server in kollect.dev/agent/internal/hubdial and, for the hub's own PKI,
// in kollect.dev/hub/internal/pki.

func TestFingerprintAndParse(t *testing.T) {
	fp := Fingerprint([]byte("not really DER"))
	if !strings.HasPrefix(fp, "sha256:") || len(fp) != len("sha256:")+64 {
		t.Fatalf("Fingerprint = %q", fp)
	}
	for _, in := range []string{fp, strings.ToUpper(fp), "  " + fp + "\n"} {
		if got, err := Parse(in); err != nil || got != fp {
			t.Errorf("Parse(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", fp[7:], "sha1:" + fp[7:], fp[:20], fp[:len(fp)-1] + "g"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
}

func TestClientConfigNeedsTheHostName(t *testing.T) {
	if _, err := ClientConfig(Fingerprint(nil), ""); err == nil {
		t.Fatal("a pinned config without a host name would not check it")
	}
	cfg, err := ClientConfig(Fingerprint(nil), "hub.example")
	if err != nil || cfg.ServerName != "hub.example" || cfg.VerifyConnection == nil {
		t.Fatalf("ClientConfig: %+v, %v", cfg, err)
	}
}
