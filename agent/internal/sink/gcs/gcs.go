package gcs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktls"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// KeyServiceAccount is the Secret key holding a service-account key file.
const KeyServiceAccount = "key.json"

// Sink writes snapshot documents to a GCS bucket.
type Sink struct {
	cfg    v1alpha1.GCSSinkConfig
	opts   snapshot.Options
	env    sink.Env
	client *storage.Client
	bucket *storage.BucketHandle
	prefix string
	last   Stats
}

var _ sink.Sink = (*Sink)(nil)

// New is the gcs backend's entry in the sink table: it builds the sink from a
// KollectSnapshotSink of type gcs.
func New(ctx context.Context, obj sink.Object, env sink.Env) (sink.Sink, error) {
	spec, err := sink.SnapshotSpec(obj)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, spec, env)
	if err != nil {
		return nil, err // never a nil *Sink in a non-nil interface
	}
	return s, nil
}

// open builds a GCS sink from a KollectSnapshotSink spec of type gcs.
func open(ctx context.Context, spec *v1alpha1.KollectSnapshotSinkSpec, env sink.Env) (*Sink, error) {
	if spec.GCS == nil {
		return nil, sink.Terminalf("spec.gcs is required for a gcs sink")
	}
	cfg := *spec.GCS
	opts, err := snapshot.NewOptions(spec.Serialization, spec.Layout, v1alpha1.FormatYAML, true)
	if err != nil {
		return nil, err
	}
	var copts []option.ClientOption
	if cfg.SecretRef != nil {
		if env.Secrets == nil {
			return nil, sink.Terminalf("secret %s: no secret reader configured", cfg.SecretRef.Name)
		}
		data, err := env.Secrets(ctx, cfg.SecretRef.Name)
		if err != nil {
			return nil, fmt.Errorf("reading secret %s: %w", cfg.SecretRef.Name, err)
		}
		key := data[KeyServiceAccount]
		if len(key) == 0 {
			return nil, sink.Terminalf("secret %s has no %s (service-account key)", cfg.SecretRef.Name, KeyServiceAccount)
		}
		copts = append(copts, option.WithAuthCredentialsJSON(option.ServiceAccount, key))
	}
	if cfg.Endpoint != "" {
		copts = append(copts, option.WithEndpoint(strings.TrimSuffix(cfg.Endpoint, "/")+"/storage/v1/"))
		if cfg.SecretRef == nil {
			// An explicit endpoint without a key is an emulator or an authenticating proxy.
			copts = append(copts, option.WithoutAuthentication())
		}
	}
	if host := os.Getenv("STORAGE_EMULATOR_HOST"); host != "" && cfg.SecretRef == nil && cfg.Endpoint == "" {
		// The client library's emulator switch: no credentials, the emulator's endpoint.
		copts = append(copts, option.WithoutAuthentication())
	}
	if cfg.Endpoint != "" {
		if err := env.Guard().CheckURL(cfg.Endpoint); err != nil {
			return nil, sink.TerminalError(err)
		}
	}
	copts, err = env.Guard().GoogleOptions(ctx, []string{storage.ScopeFullControl}, copts, nil)
	if err != nil {
		return nil, sink.TerminalError(err)
	}
	client, err := storage.NewClient(ctx, copts...)
	if err != nil {
		return nil, sink.TerminalError(fmt.Errorf("creating GCS client: %w", err))
	}
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &Sink{cfg: cfg, opts: opts, env: env, client: client, bucket: client.Bucket(cfg.Bucket), prefix: prefix}, nil
}

func (s *Sink) key(path string) string { return s.prefix + path }

// classify wraps err with op: missing buckets, refused credentials and invalid requests are
// terminal; network failures, throttling, server errors and lost races are transient.
func classify(op string, err error) error {
	wrapped := fmt.Errorf("%s: %w", op, err)
	if errors.Is(err, storage.ErrBucketNotExist) {
		return sink.TerminalError(wrapped)
	}
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		switch gerr.Code {
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			return sink.TerminalError(wrapped)
		}
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return sink.TerminalError(wrapped)
	}
	if sinktls.IsVerificationError(err) {
		return sink.TerminalError(wrapped) // untrusted until the TLS settings change
	}
	return sink.TransientError(wrapped)
}

func statusOf(err error) int {
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		return gerr.Code
	}
	return 0
}

// Probe reads the bucket's metadata and lists the sink's prefix.
func (s *Sink) Probe(ctx context.Context) error {
	if _, err := s.bucket.Attrs(ctx); err != nil {
		return classify("bucket "+s.cfg.Bucket, err)
	}
	it := s.bucket.Objects(ctx, &storage.Query{Prefix: s.prefix})
	it.PageInfo().MaxSize = 1
	if _, err := it.Next(); err != nil && !isDone(err) {
		return classify("listing gs://"+s.cfg.Bucket+"/"+s.prefix, err)
	}
	return nil
}

// Preview shows the bucket, a sample object name and the manifest name, without requests.
func (s *Sink) Preview(_ context.Context, cluster, inventory string) (sink.Preview, error) {
	dest := "gs://" + s.cfg.Bucket + "/" + s.prefix
	if s.cfg.Endpoint != "" {
		dest += " (endpoint " + s.cfg.Endpoint + ")"
	} else if host := os.Getenv("STORAGE_EMULATOR_HOST"); host != "" {
		dest += " (emulator " + host + ")"
	}
	return sink.Preview{
		Destination: dest,
		Paths:       []string{s.key(s.opts.SamplePath(cluster, inventory)), s.key(snapshot.ManifestPath(cluster, inventory))},
	}, nil
}

// Close closes the client.
func (s *Sink) Close() error { return s.client.Close() }
