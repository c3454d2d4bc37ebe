package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// ClientConfig returns a TLS client configuration that trusts exactly the CA whose
// fingerprint is pinned ("sha256:<hex>"): the server must present that CA in its chain and a
// leaf it signed for serverName. This is how agents trust a hub that made its own CA without
// anyone distributing the CA file.
func ClientConfig(pinned, serverName string) *tls.Config {
	pinned = strings.ToLower(pinned)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		// The standard verification needs the CA in a root pool, which the client does not
		// have before the handshake; VerifyConnection does the same checks against the
		// pinned CA instead.
		InsecureSkipVerify: true, //nolint:gosec // replaced by VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("hub presented no certificate")
			}
			roots := x509.NewCertPool()
			found := false
			for _, c := range cs.PeerCertificates {
				if Fingerprint(c.Raw) == pinned {
					roots.AddCert(c)
					found = true
				}
			}
			if !found {
				return fmt.Errorf("hub certificate chain does not contain the pinned CA %s", pinned)
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				DNSName: cs.ServerName, Roots: roots, Intermediates: inter,
			})
			if err != nil {
				return fmt.Errorf("verifying hub certificate against the pinned CA: %w", err)
			}
			return nil
		},
	}
}
