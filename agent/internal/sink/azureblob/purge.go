package azureblob

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

var _ sink.Purger = (*Sink)(nil)

// Holdings reports what the container holds of the cluster under the sink's prefix, read
// from its manifests (see snapshot.Holdings): listings and manifest reads, no write.
func (s *Sink) Holdings(ctx context.Context, cluster, inventory string) ([]sink.Holding, error) {
	if cluster == "" {
		return nil, sink.Terminalf("azureblob sink %s: holdings of no cluster", s.dest())
	}
	out, err := snapshot.Holdings[azcore.ETag](ctx, stored{s}, cluster, inventory)
	if err != nil {
		return nil, fmt.Errorf("azureblob sink %s: reading what it holds of cluster %s: %w", s.dest(), cluster, err)
	}
	return out, nil
}

// Purge removes the cluster's documents, then each inventory's manifest with If-Match on the
// ETag read (see snapshot.Purge).
func (s *Sink) Purge(ctx context.Context, cluster, inventory string, cutoff time.Time) ([]sink.Holding, error) {
	if err := sink.OwnCluster("azureblob", s.dest(), s.env.Cluster, cluster); err != nil {
		return nil, err
	}
	out, err := snapshot.Purge[azcore.ETag](ctx, stored{s}, cluster, inventory, cutoff)
	if err != nil {
		return out, fmt.Errorf("azureblob sink %s: purging cluster %s: %w", s.dest(), cluster, err)
	}
	return out, nil
}

// stored gives snapshot.Holdings and snapshot.Purge the container, every path relative to
// the sink's prefix.
type stored struct{ s *Sink }

func (o stored) ReadManifest(ctx context.Context, path string) (*snapshot.Manifest, azcore.ETag, error) {
	return o.s.readManifest(ctx, o.s.key(path))
}
func (o stored) List(ctx context.Context, prefix string, shallow bool) ([]string, error) {
	return o.s.list(ctx, prefix, shallow)
}
func (o stored) DeleteAll(ctx context.Context, paths []string) error {
	return o.s.deleteAll(ctx, paths)
}
func (o stored) DeleteManifest(ctx context.Context, path string, etag azcore.ETag) error {
	return o.s.deleteManifest(ctx, o.s.key(path), etag)
}

// deleteManifest deletes the manifest at key (a full name) if its ETag is still etag.
func (s *Sink) deleteManifest(ctx context.Context, key string, etag azcore.ETag) error {
	_, err := s.container.NewBlobClient(key).Delete(ctx, &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}})
	switch {
	case err == nil || bloberror.HasCode(err, bloberror.BlobNotFound):
		return nil
	case statusOf(err) == http.StatusPreconditionFailed:
		return sink.TransientError(fmt.Errorf("deleting manifest %s: %w", key, snapshot.ErrManifestChanged))
	}
	return classify("deleting manifest "+s.blobURL(key), err)
}

// Environment variables an operator's command (kollect sinks purge) reads the credential
// from, the names the Azure CLI uses: a shared access signature or the account key.
const (
	EnvSASToken   = "AZURE_STORAGE_SAS_TOKEN"
	EnvAccountKey = "AZURE_STORAGE_KEY"
)

// ExpandRef puts cluster in place of ClusterPlaceholder in the container of ref
// (ACCOUNT/CONTAINER[/PREFIX]), as the agent of that cluster does, so that kollect sinks purge
// takes the sink's own container template and reaches the container --cluster names only.
func ExpandRef(ref, cluster string) (string, error) {
	account, rest, _ := strings.Cut(ref, "/")
	cont, prefix, hasPrefix := strings.Cut(rest, "/")
	if !strings.Contains(cont, ClusterPlaceholder) {
		return ref, nil
	}
	name, err := ContainerName(cont, cluster)
	if err != nil {
		return "", err
	}
	out := account + "/" + name
	if hasPrefix {
		out += "/" + prefix
	}
	return out, nil
}

// OpenURL opens a handle onto the container and prefix of ref (ACCOUNT/CONTAINER[/PREFIX])
// for an operator's command (kollect sinks purge): the credential from AZURE_STORAGE_SAS_TOKEN
// or AZURE_STORAGE_KEY, the operator's network, no Secret. endpoint overrides the account's
// blob service URL (a sovereign cloud, the emulator). Layout options do not matter: a purge
// reads each inventory's layout from its manifest.
func OpenURL(ctx context.Context, ref, endpoint string) (*Sink, error) {
	account, rest, _ := strings.Cut(ref, "/")
	cont, prefix, _ := strings.Cut(rest, "/")
	if account == "" || cont == "" || strings.Contains(ref, "://") {
		return nil, fmt.Errorf("--azureblob %q: want ACCOUNT/CONTAINER[/PREFIX] (the endpoint goes in --endpoint)", ref)
	}
	if _, err := ContainerName(cont, ""); err != nil {
		return nil, fmt.Errorf("--azureblob %q: %w", ref, err)
	}
	cred, err := parseCredential("the environment", account, [2]string{EnvSASToken, EnvAccountKey},
		os.Getenv(EnvSASToken), os.Getenv(EnvAccountKey))
	if err != nil {
		return nil, err
	}
	cfg := v1alpha1.AzureBlobSinkConfig{Account: account, Container: cont, Prefix: prefix, Endpoint: endpoint}
	spec := &v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkAzureBlob, AzureBlob: &cfg}
	s, err := openWith(ctx, spec, cfg, cred, sink.Env{Namespace: "kollect", Name: "sinks-purge", Log: logr.Discard()})
	if err != nil {
		return nil, err
	}
	if err := s.Probe(ctx); err != nil {
		return nil, fmt.Errorf("azureblob sink %s: %w", s.dest(), err)
	}
	return s, nil
}
