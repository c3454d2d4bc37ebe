package s3

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
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
		return nil, sink.Terminalf("s3 sink %s: holdings of no cluster", s.dest())
	}
	out, err := snapshot.Holdings[string](ctx, stored{s}, cluster, inventory)
	if err != nil {
		return nil, fmt.Errorf("s3 sink %s: reading what it holds of cluster %s: %w", s.dest(), cluster, err)
	}
	return out, nil
}

// Purge removes the cluster's documents, then each inventory's manifest with If-Match on the
// ETag read (see snapshot.Purge). A store that does not support conditional deletes (501)
// gets the manifest's ETag compared just before an unconditional delete instead.
func (s *Sink) Purge(ctx context.Context, cluster, inventory string, cutoff time.Time) ([]sink.Holding, error) {
	if err := sink.OwnCluster("s3", s.dest(), s.env.Cluster, cluster); err != nil {
		return nil, err
	}
	out, err := snapshot.Purge[string](ctx, stored{s}, cluster, inventory, cutoff)
	if err != nil {
		return out, fmt.Errorf("s3 sink %s: purging cluster %s: %w", s.dest(), cluster, err)
	}
	return out, nil
}

// dest names the bucket and prefix for errors.
func (s *Sink) dest() string { return "s3://" + s.cfg.Bucket + "/" + s.prefix }

// stored gives snapshot.Holdings and snapshot.Purge the bucket, every path relative to the
// sink's prefix.
type stored struct{ s *Sink }

func (o stored) ReadManifest(ctx context.Context, path string) (*snapshot.Manifest, string, error) {
	return o.s.readManifest(ctx, o.s.key(path))
}
func (o stored) List(ctx context.Context, prefix string, shallow bool) ([]string, error) {
	return o.s.list(ctx, prefix, shallow)
}
func (o stored) DeleteAll(ctx context.Context, paths []string) error {
	return o.s.deleteAll(ctx, paths)
}
func (o stored) DeleteManifest(ctx context.Context, path string, etag string) error {
	return o.s.deleteManifest(ctx, o.s.key(path), etag)
}

// list lists the stored paths under prefix (relative to the sink's prefix).
func (s *Sink) list(ctx context.Context, prefix string, shallow bool) ([]string, error) {
	in := &s3.ListObjectsV2Input{Bucket: &s.cfg.Bucket, Prefix: aws.String(s.prefix + prefix)}
	if shallow {
		in.Delimiter = aws.String("/")
	}
	var paths []string
	p := s3.NewListObjectsV2Paginator(s.client, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("listing s3://"+s.cfg.Bucket+"/"+s.prefix+prefix, err)
		}
		for _, obj := range page.Contents {
			paths = append(paths, strings.TrimPrefix(aws.ToString(obj.Key), s.prefix))
		}
	}
	return paths, nil
}

// deleteManifest deletes the manifest at key (a full key) if its ETag is still etag.
func (s *Sink) deleteManifest(ctx context.Context, key, etag string) error {
	in := &s3.DeleteObjectInput{Bucket: &s.cfg.Bucket, Key: &key, IfMatch: aws.String(etag)}
	_, err := s.client.DeleteObject(ctx, in)
	switch st := statusOf(err); {
	case err == nil || isNotFound(err) && !isBucketMissing(err):
		return nil
	case st == http.StatusPreconditionFailed || st == http.StatusConflict:
		return sink.TransientError(fmt.Errorf("deleting manifest %s: %w", key, snapshot.ErrManifestChanged))
	case st == http.StatusNotImplemented:
		_, now, rerr := s.readManifest(ctx, key)
		if rerr != nil {
			return rerr
		}
		if now != "" && now != etag {
			return sink.TransientError(fmt.Errorf("deleting manifest %s: %w", key, snapshot.ErrManifestChanged))
		}
		in.IfMatch = nil
		_, err = s.client.DeleteObject(ctx, in)
	}
	if err != nil {
		return classify("deleting manifest "+key, err)
	}
	return nil
}

// OpenURL opens a handle onto the bucket and prefix of url (s3://bucket/prefix) for an
// operator's command (kollect sinks purge): the SDK's default credentials (environment,
// shared config, web identity, instance role), the operator's network, no Secret. endpoint
// and pathStyle are for S3-compatible stores. Layout options do not matter: a purge reads
// each inventory's layout from its manifest.
func OpenURL(ctx context.Context, url, region, endpoint string, pathStyle bool) (*Sink, error) {
	rest, ok := strings.CutPrefix(url, "s3://")
	bucket, prefix, _ := strings.Cut(rest, "/")
	if !ok || bucket == "" {
		return nil, fmt.Errorf("--s3 %q: want s3://BUCKET[/PREFIX]", url)
	}
	spec := &v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkS3,
		S3: &v1alpha1.S3SinkConfig{Bucket: bucket, Prefix: prefix, Region: region, Endpoint: endpoint, UsePathStyle: pathStyle}}
	s, err := open(ctx, spec, sink.Env{Namespace: "kollect", Name: "sinks-purge", Log: logr.Discard()})
	if err != nil {
		return nil, err
	}
	if err := s.Probe(ctx); err != nil {
		return nil, fmt.Errorf("s3 sink %s: %w", s.dest(), err)
	}
	return s, nil
}
