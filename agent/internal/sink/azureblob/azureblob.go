package azureblob

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktls"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// Secret keys of the credential: exactly one of them.
const (
	// KeySASToken holds a shared access signature (the query string, with or without "?").
	KeySASToken = "sasToken"
	// KeyAccountKey holds the storage account's shared key (base64).
	KeyAccountKey = "accountKey"
)

// Sink writes snapshot documents as blobs to a container of an Azure storage account.
type Sink struct {
	cfg       v1alpha1.AzureBlobSinkConfig
	opts      snapshot.Options
	env       sink.Env
	container *container.Client
	// url is the container's URL, without any credential.
	url    string
	prefix string
	last   Stats
}

var _ sink.Sink = (*Sink)(nil)

// New is the azureblob backend's entry in the sink table: it builds the sink from a
// KollectSnapshotSink of type azureblob.
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

// credential is what the Secret (or, for an operator's command, the environment) holds: a
// shared access signature or an account key.
type credential struct {
	sas string // the query string, without "?"
	key *container.SharedKeyCredential
}

// open builds an Azure Blob sink from a KollectSnapshotSink spec of type azureblob.
func open(ctx context.Context, spec *v1alpha1.KollectSnapshotSinkSpec, env sink.Env) (*Sink, error) {
	if spec.AzureBlob == nil {
		return nil, sink.Terminalf("spec.azureBlob is required for an azureblob sink")
	}
	cfg := *spec.AzureBlob
	if cfg.Account == "" || cfg.Container == "" {
		return nil, sink.Terminalf("spec.azureBlob needs account and container")
	}
	name, err := ContainerName(cfg.Container, env.Cluster)
	if err != nil {
		return nil, err
	}
	cfg.Container = name
	if cfg.SecretRef.Name == "" {
		return nil, sink.Terminalf("spec.azureBlob.secretRef is required: a Secret with %s or %s", KeySASToken, KeyAccountKey)
	}
	if env.Secrets == nil {
		return nil, sink.Terminalf("secret %s: no secret reader configured", cfg.SecretRef.Name)
	}
	data, err := env.Secrets(ctx, cfg.SecretRef.Name)
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", cfg.SecretRef.Name, err)
	}
	cred, err := parseCredential("secret "+cfg.SecretRef.Name, cfg.Account, [2]string{KeySASToken, KeyAccountKey},
		string(data[KeySASToken]), string(data[KeyAccountKey]))
	if err != nil {
		return nil, err
	}
	return openWith(ctx, spec, cfg, cred, env)
}

// openWith builds the sink once the credential is known.
func openWith(ctx context.Context, spec *v1alpha1.KollectSnapshotSinkSpec, cfg v1alpha1.AzureBlobSinkConfig, cred credential, env sink.Env) (*Sink, error) {
	opts, err := snapshot.NewOptions(spec.Serialization, spec.Layout, v1alpha1.FormatYAML, true)
	if err != nil {
		return nil, err
	}
	service := strings.TrimSuffix(cfg.Endpoint, "/")
	if service == "" {
		service = "https://" + cfg.Account + ".blob.core.windows.net"
	}
	if u, err := url.Parse(service); err != nil || u.RawQuery != "" || u.Host == "" {
		// A query would be a shared access signature in the spec (the webhook refuses it).
		return nil, sink.Terminalf("spec.azureBlob.endpoint must be a blob service URL without a query string")
	}
	if err := env.Guard().CheckURL(service); err != nil {
		return nil, sink.TerminalError(err)
	}
	hc, err := httpClient(ctx, env, cfg.TLS)
	if err != nil {
		return nil, err
	}
	copts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: hc,
		// The delivery worker retries with backoff behind its circuit breaker: the SDK's own
		// retries only smooth a dropped connection.
		Retry:     policy.RetryOptions{MaxRetries: 2, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: 2 * time.Second},
		Telemetry: policy.TelemetryOptions{Disabled: true},
	}}
	containerURL := service + "/" + cfg.Container
	var client *container.Client
	if cred.key != nil {
		client, err = container.NewClientWithSharedKeyCredential(containerURL, cred.key, copts)
	} else {
		client, err = container.NewClientWithNoCredential(containerURL+"?"+cred.sas, copts)
	}
	if err != nil {
		return nil, sink.Terminalf("creating the Azure Blob client for %s: %v", containerURL, scrub(err))
	}
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &Sink{cfg: cfg, opts: opts, env: env, container: client, url: containerURL, prefix: prefix}, nil
}

// parseCredential reads a shared access signature or an account key (exactly one) from
// where (a Secret, or the environment), whose names for the two are names[0] and names[1],
// naming neither value in any error.
func parseCredential(where, account string, names [2]string, sas, key string) (credential, error) {
	sas, key = strings.TrimPrefix(strings.TrimSpace(sas), "?"), strings.TrimSpace(key)
	switch {
	case sas != "" && key != "":
		return credential{}, sink.Terminalf("%s holds both %s and %s: keep one", where, names[0], names[1])
	case sas != "":
		q, err := url.ParseQuery(sas)
		if err != nil || q.Get("sig") == "" {
			return credential{}, sink.Terminalf("%s: %s is not a shared access signature (a query string with sig=…)", where, names[0])
		}
		return credential{sas: sas}, nil
	case key != "":
		if _, err := base64.StdEncoding.DecodeString(key); err != nil {
			return credential{}, sink.Terminalf("%s: %s is not a base64 account key", where, names[1])
		}
		cred, err := container.NewSharedKeyCredential(account, key)
		if err != nil {
			return credential{}, sink.Terminalf("%s: %s is not a usable account key", where, names[1])
		}
		return credential{key: cred}, nil
	}
	return credential{}, sink.Terminalf("%s needs %s (a shared access signature) or %s (the account key)", where, names[0], names[1])
}

// httpClient is the client every request goes through: dialing through the egress guard,
// with the sink's TLS settings when it has any.
func httpClient(ctx context.Context, env sink.Env, t *v1alpha1.TLSConfig) (*http.Client, error) {
	tr := env.Guard().Transport()
	if t != nil {
		if (t.CASecretRef != nil || t.ClientCertSecretRef != nil) && env.Secrets == nil {
			return nil, sink.Terminalf("spec.azureBlob.tls names a Secret, and no secret reader is configured")
		}
		tc, err := sinktls.Config(ctx, t, env.Secrets)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = tc
	}
	return &http.Client{Transport: tr}, nil
}

// key maps a document path to its blob name.
func (s *Sink) key(path string) string { return s.prefix + path }

// dest names the container and prefix for messages: a URL without credentials.
func (s *Sink) dest() string { return s.url + "/" + s.prefix }

// blobURL names the blob key (a full name) for messages: a URL without credentials, so a
// refusal names the container too, which with a container per cluster says whose it is.
func (s *Sink) blobURL(key string) string { return s.url + "/" + key }

// scrub drops the query string, a shared access signature, from the URL a failed request's
// error prints (net/http prints it whole).
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if i := strings.IndexByte(ue.URL, '?'); i >= 0 {
			ue.URL = ue.URL[:i]
		}
	}
	return err
}

// serviceError is a refusal of the service, said in one line: the operation, the error code
// and status and what the code means for this sink. The SDK's own message spans a dozen lines
// with the response body.
type serviceError struct {
	msg string
	err *azcore.ResponseError
}

func (e *serviceError) Error() string { return e.msg }
func (e *serviceError) Unwrap() error { return e.err }

// hints say what a refusal means for the sink's configuration.
var hints = map[bloberror.Code]string{
	bloberror.ContainerNotFound:    "the container does not exist: create it, the sink does not",
	bloberror.AuthenticationFailed: "the Secret's " + KeySASToken + " or " + KeyAccountKey + " was refused (wrong, expired or for another account)",
	bloberror.AuthorizationFailure: "the credential was refused or may not do this: check the Secret's " + KeySASToken + " or " + KeyAccountKey +
		" (a shared access signature needs read, add, create, write, delete and list on the container)",
	bloberror.AuthorizationPermissionMismatch: "the shared access signature lacks a permission the sink needs: read, add, create, write, delete and list",
	bloberror.AuthorizationResourceTypeMismatch: "the shared access signature is not valid for containers and blobs " +
		"(an account signature needs resource types c and o)",
	bloberror.InvalidQueryParameterValue: "the shared access signature is malformed",
	bloberror.AccountIsDisabled:          "the storage account is disabled",
}

// clusterHinted are the refusals of a signature made for another container: Azure answers
// AuthenticationFailed (the container is part of what a service signature signs), the
// emulator AuthorizationFailure. Neither names the container the signature was made for.
var clusterHinted = map[bloberror.Code]bool{bloberror.AuthenticationFailed: true, bloberror.AuthorizationFailure: true}

// clusterHint says what such a refusal usually means with a container per cluster (see
// ClusterPlaceholder): an agent given another cluster's Secret, or a cluster name its
// signature was not made for.
const clusterHint = " (where each cluster has a container of its own, check that the Secret is this cluster's " +
	"and the agent's --cluster-name the one its signature was made for)"

// classify wraps err with op: refused credentials, missing containers and invalid requests
// are terminal; network failures, throttling, server errors and lost races are transient.
func classify(op string, err error) error {
	err = scrub(err)
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		msg := fmt.Sprintf("%s: %s (HTTP %d)", op, re.ErrorCode, re.StatusCode)
		if h := hints[bloberror.Code(re.ErrorCode)]; h != "" {
			msg += ": " + h
		}
		if clusterHinted[bloberror.Code(re.ErrorCode)] {
			msg += clusterHint
		}
		wrapped := &serviceError{msg: msg, err: re}
		switch re.StatusCode {
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			return sink.TerminalError(wrapped)
		}
		return sink.TransientError(wrapped)
	}
	wrapped := fmt.Errorf("%s: %w", op, err)
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return sink.TerminalError(wrapped) // a misspelt account or endpoint
	}
	if sinktls.IsVerificationError(err) {
		return sink.TerminalError(wrapped) // untrusted until the TLS settings change
	}
	return sink.TransientError(wrapped)
}

func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// Probe lists one blob under the sink's prefix: the container exists and the credential may
// list it (which every export's resync does).
func (s *Sink) Probe(ctx context.Context) error {
	one := int32(1)
	pager := s.container.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &s.prefix, MaxResults: &one})
	if _, err := pager.NextPage(ctx); err != nil {
		return classify("listing "+s.dest(), err)
	}
	return nil
}

// Preview shows the container, a sample blob name and the manifest name, without requests.
func (s *Sink) Preview(_ context.Context, cluster, inventory string) (sink.Preview, error) {
	return sink.Preview{
		Destination: s.dest(),
		Paths:       []string{s.key(s.opts.SamplePath(cluster, inventory)), s.key(snapshot.ManifestPath(cluster, inventory))},
	}, nil
}

// Close releases nothing: the client holds no connection of its own beyond the transport's
// idle pool.
func (s *Sink) Close() error { return nil }
