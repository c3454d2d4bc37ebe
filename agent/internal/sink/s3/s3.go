package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktls"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// Secret keys of the static credentials.
const (
	KeyAccessKeyID     = "accessKeyID"
	KeySecretAccessKey = "secretAccessKey"
	KeySessionToken    = "sessionToken"
)

// Sink writes snapshot documents to an S3 bucket.
type Sink struct {
	cfg    v1alpha1.S3SinkConfig
	opts   snapshot.Options
	env    sink.Env
	client *s3.Client
	prefix string
	// last describes the latest export, for logs and tests.
	last Stats
}

var _ sink.Sink = (*Sink)(nil)

// New is the s3 backend's entry in the sink table: it builds the sink from a
// KollectSnapshotSink of type s3.
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

// open builds an S3 sink from a KollectSnapshotSink spec of type s3.
func open(ctx context.Context, spec *v1alpha1.KollectSnapshotSinkSpec, env sink.Env) (*Sink, error) {
	if spec.S3 == nil {
		return nil, sink.Terminalf("spec.s3 is required for an s3 sink")
	}
	cfg := *spec.S3
	opts, err := snapshot.NewOptions(spec.Serialization, spec.Layout, v1alpha1.FormatYAML, true)
	if err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.KMSKeyID != "" && cfg.ServerSideEncryption != "aws:kms" {
		return nil, sink.Terminalf("kmsKeyID requires serverSideEncryption aws:kms")
	}
	loadOpts := []func(*config.LoadOptions) error{config.WithRegion(cfg.Region)}
	if cfg.SecretRef != nil {
		provider, err := staticCredentials(ctx, env, cfg.SecretRef.Name)
		if err != nil {
			return nil, err
		}
		loadOpts = append(loadOpts, config.WithCredentialsProvider(provider))
	}
	if cfg.Endpoint != "" {
		if err := env.Guard().CheckURL(cfg.Endpoint); err != nil {
			return nil, sink.TerminalError(err)
		}
	}
	hc, err := httpClient(ctx, env, cfg.TLS)
	if err != nil {
		return nil, err
	}
	loadOpts = append(loadOpts, config.WithHTTPClient(hc))
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, sink.TerminalError(fmt.Errorf("loading AWS configuration: %w", err))
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.UsePathStyle
	})
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &Sink{cfg: cfg, opts: opts, env: env, client: client, prefix: prefix}, nil
}

func staticCredentials(ctx context.Context, env sink.Env, name string) (aws.CredentialsProvider, error) {
	if env.Secrets == nil {
		return nil, sink.Terminalf("secret %s: no secret reader configured", name)
	}
	data, err := env.Secrets(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", name, err)
	}
	id, key := strings.TrimSpace(string(data[KeyAccessKeyID])), strings.TrimSpace(string(data[KeySecretAccessKey]))
	if id == "" || key == "" {
		return nil, sink.Terminalf("secret %s needs %s and %s", name, KeyAccessKeyID, KeySecretAccessKey)
	}
	return credentials.NewStaticCredentialsProvider(id, key, strings.TrimSpace(string(data[KeySessionToken]))), nil
}

// httpClient is the client every S3 request goes through: dialing through the egress guard,
// with the sink's TLS settings when it has any.
func httpClient(ctx context.Context, env sink.Env, t *v1alpha1.TLSConfig) (*awshttp.BuildableClient, error) {
	guarded := env.Guard().Transport()
	client := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.DialContext, tr.Proxy = guarded.DialContext, guarded.Proxy
	})
	if t == nil {
		return client, nil
	}
	tc := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, for tests
	if ref := t.CASecretRef; ref != nil {
		if env.Secrets == nil {
			return nil, sink.Terminalf("secret %s: no secret reader configured", ref.Name)
		}
		data, err := env.Secrets(ctx, ref.Name)
		if err != nil {
			return nil, fmt.Errorf("reading secret %s: %w", ref.Name, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(data[ref.Key]) {
			return nil, sink.Terminalf("secret %s key %s holds no PEM certificate", ref.Name, ref.Key)
		}
		tc.RootCAs = pool
	}
	return client.WithTransportOptions(func(tr *http.Transport) { tr.TLSClientConfig = tc }), nil
}

// key maps a document path to its object key.
func (s *Sink) key(path string) string { return s.prefix + path }

// terminalCodes are S3 error codes that retrying cannot fix.
var terminalCodes = map[string]bool{
	"NoSuchBucket": true, "AccessDenied": true, "InvalidAccessKeyId": true, "SignatureDoesNotMatch": true,
	"AllAccessDisabled": true, "InvalidBucketName": true, "AuthorizationHeaderMalformed": true,
	"KMS.NotFoundException": true, "KMS.DisabledException": true, "InvalidToken": true, "ExpiredToken": true,
	"PermanentRedirect": true, "InvalidArgument": true, "NotFound": true, "Forbidden": true,
}

// classify wraps err with op: refused credentials, missing buckets and invalid requests are
// terminal; network failures, throttling, server errors and lost races are transient.
func classify(op string, err error) error {
	wrapped := fmt.Errorf("%s: %w", op, err)
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "AccessDenied" {
		// The usual cause with credentials scoped to one cluster's prefix: the sink's
		// cluster name is not the one its credentials were issued for.
		return sink.TerminalError(fmt.Errorf("%w (the credentials' policy refuses it: are they this cluster's?)", wrapped))
	}
	if errors.As(err, &apiErr) && terminalCodes[apiErr.ErrorCode()] {
		return sink.TerminalError(wrapped)
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			return sink.TerminalError(wrapped)
		}
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return sink.TerminalError(wrapped) // a misspelt endpoint
	}
	if sinktls.IsVerificationError(err) {
		return sink.TerminalError(wrapped) // untrusted until the TLS settings change
	}
	return sink.TransientError(wrapped)
}

func isNotFound(err error) bool {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode() == "NoSuchKey" || apiErr.ErrorCode() == "NotFound") {
		return true
	}
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound
}

func statusOf(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// Probe checks that the bucket exists and that the credentials may list the sink's prefix:
// the directory of the sink's cluster under it (see clusterDir), which is all a credential
// scoped to one cluster may list.
func (s *Sink) Probe(ctx context.Context) error {
	listed := s.prefix + s.clusterDir()
	list := func() error {
		_, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &s.cfg.Bucket, Prefix: aws.String(listed), MaxKeys: aws.Int32(1)})
		return err
	}
	if _, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.cfg.Bucket}); err != nil {
		// The answer to a HEAD has no body, so a refusal says only "403 Forbidden" or "404
		// NotFound": the listing's answer names the cause (SignatureDoesNotMatch,
		// InvalidAccessKeyId, AccessDenied, NoSuchBucket).
		st := statusOf(err)
		if st != http.StatusForbidden && st != http.StatusNotFound {
			return classify("bucket "+s.cfg.Bucket, err)
		}
		if lerr := list(); lerr != nil {
			return classify("bucket "+s.cfg.Bucket+": listing s3://"+s.cfg.Bucket+"/"+listed, lerr)
		}
		if st == http.StatusNotFound {
			return classify("bucket "+s.cfg.Bucket, err)
		}
		// HeadBucket needs s3:ListBucket without a prefix condition, which a credential
		// scoped to its cluster's prefix does not have; the listing it may do succeeded.
		return nil
	}
	if err := list(); err != nil {
		return classify("listing s3://"+s.cfg.Bucket+"/"+listed, err)
	}
	return nil
}

// clusterDir is the directory of the sink's cluster under the prefix ("east/"), where its
// manifests and, with the default path templates, all its documents are: the one place a
// credential of that cluster needs (docs/sinks/s3.md, "One writer per cluster"). It is ""
// for a handle of no cluster (an operator's purge), which probes the whole prefix.
func (s *Sink) clusterDir() string {
	if s.env.Cluster == "" {
		return ""
	}
	manifest := snapshot.ManifestPath(s.env.Cluster, "_")
	return manifest[:strings.LastIndexByte(manifest, '/')+1]
}

// Preview shows the bucket, a sample object key and the manifest key, without requests.
func (s *Sink) Preview(_ context.Context, cluster, inventory string) (sink.Preview, error) {
	dest := "s3://" + s.cfg.Bucket + "/" + s.prefix + " (region " + s.cfg.Region
	if s.cfg.Endpoint != "" {
		dest += ", endpoint " + s.cfg.Endpoint
	}
	if s.cfg.ServerSideEncryption != "" {
		dest += ", encryption " + string(s.cfg.ServerSideEncryption)
	}
	return sink.Preview{
		Destination: dest + ")",
		Paths:       []string{s.key(s.opts.SamplePath(cluster, inventory)), s.key(snapshot.ManifestPath(cluster, inventory))},
	}, nil
}

// Close releases idle connections.
func (s *Sink) Close() error { return nil }
