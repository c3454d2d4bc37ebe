package mongodb

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

const defaultCollection = "rows"

// settings is the resolved configuration of one sink.
type settings struct {
	database, collection string
	client               *options.ClientOptions
	destination          string
}

// resolve builds client options from the spec and its Secrets. Credentials never appear in
// the URI (the CRD forbids them there) nor in the destination shown in status.
func resolve(ctx context.Context, spec *v1alpha1.MongoDBSinkConfig, env sink.Env) (*settings, error) {
	if spec == nil {
		return nil, sink.Terminalf("mongodb sink %s/%s: spec.mongodb is missing", env.Namespace, env.Name)
	}
	u, err := url.Parse(spec.URI)
	if err != nil || (u.Scheme != "mongodb" && u.Scheme != "mongodb+srv") {
		return nil, sink.Terminalf("mongodb sink %s/%s: invalid uri %q", env.Namespace, env.Name, spec.URI)
	}
	if u.User != nil {
		return nil, sink.Terminalf("mongodb sink %s/%s: put credentials in the secretRef, not in the uri", env.Namespace, env.Name)
	}
	if spec.Database == "" {
		return nil, sink.Terminalf("mongodb sink %s/%s: database is empty", env.Namespace, env.Name)
	}
	s := &settings{database: spec.Database, collection: spec.Collection}
	if s.collection == "" {
		s.collection = defaultCollection
	}
	opts := options.Client().ApplyURI(spec.URI).SetAppName("kollect-agent").
		SetServerSelectionTimeout(10 * time.Second).SetConnectTimeout(10 * time.Second).SetDialer(env.Guard())
	// Hosts named in the URI are checked now; SRV records, and every address, as each
	// connection is made.
	for _, h := range opts.Hosts {
		if err := env.Guard().CheckHostPort(h); err != nil {
			return nil, sink.TerminalError(err)
		}
	}
	if spec.SecretRef != nil {
		data, err := secret(ctx, env, spec.SecretRef.Name)
		if err != nil {
			return nil, err
		}
		cred := options.Credential{Username: string(data["username"]), Password: string(data["password"]),
			AuthSource: string(data["authSource"])}
		if cred.Username == "" {
			return nil, sink.Terminalf("mongodb sink %s/%s: Secret %s has no key username", env.Namespace, env.Name, spec.SecretRef.Name)
		}
		if cred.AuthSource == "" {
			cred.AuthSource = "admin"
		}
		cred.PasswordSet = cred.Password != ""
		opts.SetAuth(cred)
	}
	if spec.TLS != nil {
		cfg, err := tlsConfig(ctx, spec.TLS, env)
		if err != nil {
			return nil, err
		}
		if cfg != nil {
			opts.SetTLSConfig(cfg)
		}
	}
	if err := opts.Validate(); err != nil {
		return nil, sink.Terminalf("mongodb sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	s.client = opts
	s.destination = fmt.Sprintf("%s://%s %s.%s", u.Scheme, u.Host, s.database, s.collection)
	return s, nil
}

func secret(ctx context.Context, env sink.Env, name string) (map[string][]byte, error) {
	if env.Secrets == nil {
		return nil, sink.Terminalf("mongodb sink %s/%s: no Secret reader to resolve %s", env.Namespace, env.Name, name)
	}
	data, err := env.Secrets(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("mongodb sink %s/%s: reading Secret %s: %w", env.Namespace, env.Name, name, err)
	}
	return data, nil
}

// tlsConfig returns nil when TLS is neither enabled nor configured (the URI's tls=true still
// applies then).
func tlsConfig(ctx context.Context, t *v1alpha1.TLSConfig, env sink.Env) (*tls.Config, error) {
	if !t.Enabled && t.CASecretRef == nil && t.ClientCertSecretRef == nil && !t.InsecureSkipVerify {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, tests only
	if t.CASecretRef != nil {
		data, err := secret(ctx, env, t.CASecretRef.Name)
		if err != nil {
			return nil, err
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(data[t.CASecretRef.Key]) {
			return nil, sink.Terminalf("mongodb sink %s/%s: Secret %s key %s holds no PEM certificate", env.Namespace, env.Name, t.CASecretRef.Name, t.CASecretRef.Key)
		}
		cfg.RootCAs = roots
	}
	if t.ClientCertSecretRef != nil {
		data, err := secret(ctx, env, t.ClientCertSecretRef.Name)
		if err != nil {
			return nil, err
		}
		cert, err := tls.X509KeyPair(data["tls.crt"], data["tls.key"])
		if err != nil {
			return nil, sink.Terminalf("mongodb sink %s/%s: client certificate in Secret %s: %w", env.Namespace, env.Name, t.ClientCertSecretRef.Name, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
