package gcs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/snapshot"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

var _ sink.Purger = (*Sink)(nil)

// Holdings reports what the bucket holds of the cluster under the sink's prefix, read from its
// manifests (see snapshot.Holdings): listings and manifest reads, no write.
func (s *Sink) Holdings(ctx context.Context, cluster, inventory string) ([]sink.Holding, error) {
	if cluster == "" {
		return nil, sink.Terminalf("gcs sink %s: holdings of no cluster", s.dest())
	}
	out, err := snapshot.Holdings[int64](ctx, stored{s}, cluster, inventory)
	if err != nil {
		return nil, fmt.Errorf("gcs sink %s: reading what it holds of cluster %s: %w", s.dest(), cluster, err)
	}
	return out, nil
}

// Purge removes the cluster's documents, then each inventory's manifest on the condition that
// its generation is still the one read (see snapshot.Purge).
func (s *Sink) Purge(ctx context.Context, cluster, inventory string, cutoff time.Time) ([]sink.Holding, error) {
	if err := sink.OwnCluster("gcs", s.dest(), s.env.Cluster, cluster); err != nil {
		return nil, err
	}
	out, err := snapshot.Purge[int64](ctx, stored{s}, cluster, inventory, cutoff)
	if err != nil {
		return out, fmt.Errorf("gcs sink %s: purging cluster %s: %w", s.dest(), cluster, err)
	}
	return out, nil
}

// dest names the bucket and prefix for errors.
func (s *Sink) dest() string { return "gs://" + s.cfg.Bucket + "/" + s.prefix }

// stored gives snapshot.Holdings and snapshot.Purge the bucket, every path relative to the
// sink's prefix.
type stored struct{ s *Sink }

func (o stored) ReadManifest(ctx context.Context, path string) (*snapshot.Manifest, int64, error) {
	return o.s.readManifest(ctx, o.s.key(path))
}
func (o stored) List(ctx context.Context, prefix string, shallow bool) ([]string, error) {
	return o.s.list(ctx, prefix, shallow)
}
func (o stored) DeleteAll(ctx context.Context, paths []string) error {
	return o.s.deleteAll(ctx, paths)
}
func (o stored) DeleteManifest(ctx context.Context, path string, gen int64) error {
	return o.s.deleteManifest(ctx, o.s.key(path), gen)
}

// list lists the stored paths under prefix (relative to the sink's prefix).
func (s *Sink) list(ctx context.Context, prefix string, shallow bool) ([]string, error) {
	q := &storage.Query{Prefix: s.prefix + prefix}
	if shallow {
		q.Delimiter = "/"
	}
	var paths []string
	it := s.bucket.Objects(ctx, q)
	for {
		attrs, err := it.Next()
		if isDone(err) {
			return paths, nil
		}
		if err != nil {
			return nil, classify("listing gs://"+s.cfg.Bucket+"/"+s.prefix+prefix, err)
		}
		if attrs.Name != "" { // a shallow listing's "directories" have a Prefix and no Name
			paths = append(paths, strings.TrimPrefix(attrs.Name, s.prefix))
		}
	}
}

// deleteManifest deletes the manifest at key (a full name) if its generation is still gen:
// the delete carries ifGenerationMatch, and the generation is compared just before it too,
// because the GCS emulator the tests run (a stand-in) ignores a delete's precondition.
func (s *Sink) deleteManifest(ctx context.Context, key string, gen int64) error {
	obj := s.bucket.Object(key)
	attrs, err := obj.Attrs(ctx)
	switch {
	case errors.Is(err, storage.ErrObjectNotExist):
		return nil
	case err != nil:
		return classify("reading manifest "+key, err)
	case attrs.Generation != gen:
		return sink.TransientError(fmt.Errorf("deleting manifest %s: %w", key, snapshot.ErrManifestChanged))
	}
	err = obj.If(storage.Conditions{GenerationMatch: gen}).Delete(ctx)
	switch st := statusOf(err); {
	case err == nil || errors.Is(err, storage.ErrObjectNotExist):
		return nil
	case st == http.StatusPreconditionFailed || st == http.StatusConflict:
		return sink.TransientError(fmt.Errorf("deleting manifest %s: %w", key, snapshot.ErrManifestChanged))
	}
	return classify("deleting manifest "+key, err)
}

// OpenURL opens a handle onto the bucket and prefix of url (gs://bucket/prefix) for an
// operator's command (kollect sinks purge): Application Default Credentials, or none with
// endpoint (an emulator) or STORAGE_EMULATOR_HOST, and the operator's network. Layout options
// do not matter: a purge reads each inventory's layout from its manifest.
func OpenURL(ctx context.Context, url, endpoint string) (*Sink, error) {
	rest, ok := strings.CutPrefix(url, "gs://")
	bucket, prefix, _ := strings.Cut(rest, "/")
	if !ok || bucket == "" {
		return nil, fmt.Errorf("--gcs %q: want gs://BUCKET[/PREFIX]", url)
	}
	spec := &v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGCS,
		GCS: &v1alpha1.GCSSinkConfig{Bucket: bucket, Prefix: prefix, Endpoint: endpoint}}
	s, err := open(ctx, spec, sink.Env{Namespace: "kollect", Name: "sinks-purge", Log: logr.Discard()})
	if err != nil {
		return nil, err
	}
	if err := s.Probe(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("gcs sink %s: %w", s.dest(), err)
	}
	return s, nil
}
