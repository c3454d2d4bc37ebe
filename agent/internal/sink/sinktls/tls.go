package sinktls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/api/v1alpha1"
)

// Config builds the client TLS configuration, nil when TLS is off. Certificates come from
// Secrets in the sink's namespace; a custom CA is trusted in addition to the system pool.
func Config(ctx context.Context, t *v1alpha1.TLSConfig, secrets sink.SecretGetter) (*tls.Config, error) {
	if t == nil || !(t.Enabled || t.CASecretRef != nil || t.ClientCertSecretRef != nil || t.InsecureSkipVerify) {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, for tests
	if ref := t.CASecretRef; ref != nil {
		data, err := secrets(ctx, ref.Name)
		if err != nil {
			return nil, fmt.Errorf("reading CA secret %s: %w", ref.Name, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(data[ref.Key]) {
			return nil, sink.Terminalf("secret %s key %s holds no PEM certificate", ref.Name, ref.Key)
		}
		cfg.RootCAs = pool
	}
	if ref := t.ClientCertSecretRef; ref != nil {
		data, err := secrets(ctx, ref.Name)
		if err != nil {
			return nil, fmt.Errorf("reading client certificate secret %s: %w", ref.Name, err)
		}
		cert, err := tls.X509KeyPair(data["tls.crt"], data["tls.key"])
		if err != nil {
			return nil, sink.Terminalf("client certificate in secret %s: %w", ref.Name, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// IsVerificationError reports a certificate the client refused (untrusted, expired or not
// valid for the host): a configuration problem that stays until the TLS settings or the
// server's certificate change.
func IsVerificationError(err error) bool {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	return errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host) || errors.As(err, &verify)
}
