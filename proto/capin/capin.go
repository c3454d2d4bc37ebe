package capin

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

const prefix = "sha256:"

// Fingerprint is "sha256:<hex>" of a DER certificate: the pin the hub publishes for its CA.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return prefix + hex.EncodeToString(sum[:])
}

// Parse normalises a pin as a user typed it (case, surrounding space) and refuses one that is
// not "sha256:" and 64 hex digits, so a typo is reported as such rather than as a hub whose
// chain lacks the CA.
func Parse(pin string) (string, error) {
	p := strings.ToLower(strings.TrimSpace(pin))
	digest, ok := strings.CutPrefix(p, prefix)
	if !ok || len(digest) != 2*sha256.Size {
		return "", fmt.Errorf("CA fingerprint %q: want sha256: and 64 hex digits, as the hub prints it", pin)
	}
	if _, err := hex.DecodeString(digest); err != nil {
		return "", fmt.Errorf("CA fingerprint %q: want sha256: and 64 hex digits, as the hub prints it", pin)
	}
	return p, nil
}

// ClientConfig returns a TLS client configuration that trusts exactly the CA whose fingerprint
// is pinned: the server must present that CA in its chain and a leaf it signed, valid now and
// for serverName (a DNS name or an IP address, checked against the leaf's SANs). serverName is
// required: without it the host name would go unchecked.
func ClientConfig(pin, serverName string) (*tls.Config, error) {
	pinned, err := Parse(pin)
	if err != nil {
		return nil, err
	}
	if serverName == "" {
		return nil, errors.New("pinned CA: the hub's host name is required")
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		// The standard verification needs the CA in a root pool, which the client does not
		// have before the handshake; VerifyConnection does the same checks against the
		// pinned CA instead.
		InsecureSkipVerify: true, //nolint:gosec // replaced by VerifyConnection below
		// The name is captured here rather than read from the ConnectionState: for an IP
		// address no SNI is sent and ConnectionState.ServerName is empty, which would turn
		// the host name check off.
		VerifyConnection: func(cs tls.ConnectionState) error { return verify(cs.PeerCertificates, pinned, serverName) },
	}, nil
}

func verify(certs []*x509.Certificate, pinned, serverName string) error {
	if len(certs) == 0 {
		return errors.New("hub presented no certificate")
	}
	roots := x509.NewCertPool()
	found := false
	for _, c := range certs {
		if Fingerprint(c.Raw) == pinned {
			roots.AddCert(c)
			found = true
		}
	}
	if !found {
		return fmt.Errorf("hub certificate chain does not contain the pinned CA %s", pinned)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{DNSName: serverName, Roots: roots, Intermediates: inter}); err != nil {
		return fmt.Errorf("verifying hub certificate against the pinned CA: %w", err)
	}
	return nil
}
