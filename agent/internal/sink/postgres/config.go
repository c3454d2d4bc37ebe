package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// Defaults applied when the spec leaves a field empty (the CRD defaults them too; these cover
// specs built in code).
const (
	defaultSchema           = "kollect"
	defaultTable            = "rows"
	defaultSSLMode          = "verify-full"
	defaultStatementTimeout = 30 * time.Second
	// defaultMaxConnections is the pool size per sink object: what a fleet's database can
	// give every agent (see docs/sinks/postgres.md, "For a fleet"). The CRD defaults
	// maxConnections to the same.
	defaultMaxConnections = 4
	// descriptionCacheCapacity bounds the statement descriptions a connection caches (see
	// pooling.go): a sink runs a few dozen distinct statements, and pgx's default of 512 per
	// connection is allocated with it, in a pool per sink (per tenant).
	descriptionCacheCapacity = 64
)

// settings is the resolved configuration of one sink.
type settings struct {
	schema, table string
	poolConfig    *pgxpool.Config
	// begin starts every transaction of the sink, with its statement timeout.
	begin pgx.TxOptions
	// destination names the target without credentials, for previews and errors.
	destination string
}

// resolve turns the spec and its Secrets into a pool configuration. A missing Secret or key is
// terminal: retrying cannot help until someone fixes the configuration.
func resolve(ctx context.Context, spec *v1alpha1.PostgresSinkConfig, env sink.Env) (*settings, error) {
	if spec == nil {
		return nil, sink.Terminalf("postgres sink %s/%s: spec.postgres is missing", env.Namespace, env.Name)
	}
	s := &settings{schema: spec.Schema, table: spec.Table}
	if s.schema == "" {
		s.schema = defaultSchema
	}
	if s.table == "" {
		s.table = defaultTable
	}
	port := int(spec.Port)
	if port == 0 {
		port = 5432
	}
	user, password, err := credentials(ctx, spec, env)
	if err != nil {
		return nil, err
	}
	u := url.URL{Scheme: "postgres", Host: fmt.Sprintf("%s:%d", spec.Host, port), Path: "/" + spec.Database}
	if password != "" {
		u.User = url.UserPassword(user, password)
	} else {
		u.User = url.User(user)
	}
	q := url.Values{}
	q.Set("sslmode", sslMode(spec))
	q.Set("application_name", "kollect-agent")
	u.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, sink.Terminalf("postgres sink %s/%s: invalid connection settings: %w", env.Namespace, env.Name, err)
	}
	timeout := spec.StatementTimeout.Duration
	if timeout <= 0 {
		timeout = defaultStatementTimeout
	}
	// Not a startup parameter: PgBouncer refuses the connection for it (see pooling.go).
	s.begin = beginWithTimeout(timeout)
	cfg.MaxConns = spec.MaxConnections
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = defaultMaxConnections
	}
	cfg.MinConns = 0
	tuneForPoolers(cfg)
	cfg.ConnConfig.DescriptionCacheCapacity = descriptionCacheCapacity
	guard := env.Guard()
	if err := guard.CheckHost(spec.Host); err != nil {
		return nil, sink.TerminalError(err)
	}
	cfg.ConnConfig.DialFunc = guard.DialContext
	if err := applyTLS(ctx, cfg, spec, env); err != nil {
		return nil, err
	}
	s.poolConfig = cfg
	s.destination = fmt.Sprintf("postgres://%s:%d/%s %s.%s", spec.Host, port, spec.Database, s.schema, s.table)
	return s, nil
}

// sslMode is the libpq sslmode to connect with. The default verifies the server's name and
// chain. require with a CA verifies the chain, as libpq's require does when it has a root
// certificate: pgconn would do so only for a CA file, while ours comes from a Secret, applied
// after parsing. Modes that verify nothing need a KollectClusterScope's grant (package
// validation), checked before the sink is built.
func sslMode(spec *v1alpha1.PostgresSinkConfig) string {
	mode := string(spec.SSLMode)
	if mode == "" {
		mode = defaultSSLMode
	}
	if mode == "require" && spec.TLS != nil && spec.TLS.CASecretRef != nil {
		mode = "verify-ca"
	}
	return mode
}

// credentials reads username and password from the secretRef.
func credentials(ctx context.Context, spec *v1alpha1.PostgresSinkConfig, env sink.Env) (user, password string, err error) {
	if spec.SecretRef.Name == "" {
		return "", "", sink.Terminalf("postgres sink %s/%s: secretRef.name is empty", env.Namespace, env.Name)
	}
	data, err := secret(ctx, env, spec.SecretRef.Name)
	if err != nil {
		return "", "", err
	}
	user = string(data["username"])
	if user == "" {
		return "", "", sink.Terminalf("postgres sink %s/%s: Secret %s has no key username", env.Namespace, env.Name, spec.SecretRef.Name)
	}
	return user, string(data["password"]), nil
}

func secret(ctx context.Context, env sink.Env, name string) (map[string][]byte, error) {
	if env.Secrets == nil {
		return nil, sink.Terminalf("postgres sink %s/%s: no Secret reader to resolve %s", env.Namespace, env.Name, name)
	}
	data, err := env.Secrets(ctx, name)
	if err != nil {
		// The getter decides the class (a missing Secret is terminal, an API hiccup transient).
		return nil, fmt.Errorf("postgres sink %s/%s: reading Secret %s: %w", env.Namespace, env.Name, name, err)
	}
	return data, nil
}

// applyTLS adds the CA and client certificate from Secrets to the TLS configuration pgconn
// derived from sslmode. pgconn's verify-ca check reads RootCAs from the same *tls.Config at
// handshake time, so filling it in afterwards is enough. The CA replaces the system roots, as
// libpq's sslrootcert does: verify-ca checks no name, so a public authority's certificate for
// any name would otherwise pass.
func applyTLS(ctx context.Context, cfg *pgxpool.Config, spec *v1alpha1.PostgresSinkConfig, env sink.Env) error {
	t := spec.TLS
	if t == nil {
		return nil
	}
	configs := []*tls.Config{cfg.ConnConfig.TLSConfig}
	for _, fb := range cfg.ConnConfig.Fallbacks {
		configs = append(configs, fb.TLSConfig)
	}
	var roots *x509.CertPool
	if t.CASecretRef != nil {
		data, err := secret(ctx, env, t.CASecretRef.Name)
		if err != nil {
			return err
		}
		pem := data[t.CASecretRef.Key]
		if len(pem) == 0 {
			return sink.Terminalf("postgres sink %s/%s: Secret %s has no key %s", env.Namespace, env.Name, t.CASecretRef.Name, t.CASecretRef.Key)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return sink.Terminalf("postgres sink %s/%s: Secret %s key %s holds no PEM certificate", env.Namespace, env.Name, t.CASecretRef.Name, t.CASecretRef.Key)
		}
	}
	var certs []tls.Certificate
	if t.ClientCertSecretRef != nil {
		data, err := secret(ctx, env, t.ClientCertSecretRef.Name)
		if err != nil {
			return err
		}
		cert, err := tls.X509KeyPair(data["tls.crt"], data["tls.key"])
		if err != nil {
			return sink.Terminalf("postgres sink %s/%s: client certificate in Secret %s: %w", env.Namespace, env.Name, t.ClientCertSecretRef.Name, err)
		}
		certs = []tls.Certificate{cert}
	}
	for _, c := range configs {
		if c == nil { // sslmode=disable: TLS settings have nothing to apply to
			continue
		}
		if roots != nil {
			c.RootCAs = roots
		}
		if certs != nil {
			c.Certificates = certs
		}
		if t.ServerName != "" {
			c.ServerName = t.ServerName
		}
		if t.InsecureSkipVerify {
			c.InsecureSkipVerify = true
			c.VerifyPeerCertificate = nil
		}
	}
	return nil
}
