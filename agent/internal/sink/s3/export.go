package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/snapshot"
)

// Stats counts what the latest export did.
type Stats = snapshot.Publication

// LastStats describes the latest successful export.
func (s *Sink) LastStats() Stats { return s.last }

// errConflict marks a manifest that changed under us: another writer of this cluster and
// inventory. The delivery worker retries; the next attempt reads the new manifest.
var errConflict = errors.New("manifest changed concurrently")

// Export writes the documents that changed, then the manifest, then prunes.
func (s *Sink) Export(ctx context.Context, b *sink.Batch) error {
	manifestKey := s.key(snapshot.ManifestPath(b.Envelope.Cluster, b.Envelope.Inventory))
	st, err := snapshot.Publish[string](ctx, s.opts, objects{s}, manifestKey, b)
	if err != nil && !errors.Is(err, sink.ErrContended) { // contended: written, and reported
		return err
	}
	s.last = st
	s.env.Log.V(1).Info("exported", "inventory", b.Envelope.Inventory, "written", st.Written, "deleted", st.Deleted)
	return err
}

var _ sink.Confirmer = (*Sink)(nil)

// Confirm rewrites the inventory's manifest with a new confirmedAt when it still lists the
// confirmed checksum; no document is written.
func (s *Sink) Confirm(ctx context.Context, c sink.Confirmation) error {
	return snapshot.Confirm[string](ctx, objects{s}, s.key(snapshot.ManifestPath(c.Cluster, c.Inventory)), c)
}

// objects gives snapshot.Publish the bucket operations of the sink.
type objects struct{ s *Sink }

func (o objects) ReadManifest(ctx context.Context, key string) (*snapshot.Manifest, string, error) {
	return o.s.readManifest(ctx, key)
}
func (o objects) ListOwned(ctx context.Context, m *snapshot.Matcher) ([]string, error) {
	return o.s.listOwned(ctx, m)
}
func (o objects) PutAll(ctx context.Context, files []snapshot.File) error {
	return o.s.putAll(ctx, files)
}
func (o objects) PutManifest(ctx context.Context, key string, data []byte, v string) error {
	return o.s.putManifest(ctx, key, data, v)
}
func (o objects) DeleteAll(ctx context.Context, paths []string) error {
	return o.s.deleteAll(ctx, paths)
}

func (s *Sink) readManifest(ctx context.Context, key string) (*snapshot.Manifest, string, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.cfg.Bucket, Key: &key})
	if isNotFound(err) && !isBucketMissing(err) || isAccessDenied(err) && s.absent(ctx, key) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", classify("reading manifest "+key, err)
	}
	defer out.Body.Close()
	raw, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, "", sink.TransientError(fmt.Errorf("reading manifest %s: %w", key, err))
	}
	m, err := snapshot.ParseManifest(raw)
	if err != nil {
		// A manifest we cannot read is replaced, and the listing below finds stale keys.
		s.env.Log.Info("ignoring unreadable manifest", "key", key, "error", err.Error())
		return nil, aws.ToString(out.ETag), nil
	}
	return m, aws.ToString(out.ETag), nil
}

// absent reports whether a listing shows that key does not exist. AWS answers a read of a
// missing key with 403 AccessDenied, not 404, to a caller without s3:ListBucket, and may do so
// when that permission carries an s3:prefix condition (the "One writer per cluster" policy of
// docs/sinks/s3.md): the first export of such a credential would otherwise stop at the
// manifest that does not exist yet. A refused listing, or a key that exists, leaves the
// refusal standing.
func (s *Sink) absent(ctx context.Context, key string) bool {
	out, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &s.cfg.Bucket, Prefix: &key, MaxKeys: aws.Int32(1)})
	return err == nil && (len(out.Contents) == 0 || aws.ToString(out.Contents[0].Key) != key)
}

func isAccessDenied(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "AccessDenied"
}

func isBucketMissing(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchBucket"
}

// listOwned lists the stored paths the matcher owns.
func (s *Sink) listOwned(ctx context.Context, m *snapshot.Matcher) ([]string, error) {
	var paths []string
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.cfg.Bucket, Prefix: aws.String(s.prefix + m.Prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("listing s3://"+s.cfg.Bucket+"/"+s.prefix+m.Prefix, err)
		}
		for _, obj := range page.Contents {
			if path := aws.ToString(obj.Key)[len(s.prefix):]; m.Match(path) {
				paths = append(paths, path)
			}
		}
	}
	return paths, nil
}

func (s *Sink) putAll(ctx context.Context, files []snapshot.File) error {
	return snapshot.Parallel(ctx, files, snapshot.Uploads, s.put)
}

func (s *Sink) put(ctx context.Context, f *snapshot.File) error {
	in := &s3.PutObjectInput{
		Bucket:        &s.cfg.Bucket,
		Key:           aws.String(s.key(f.Path)),
		Body:          bytes.NewReader(f.Data),
		ContentLength: aws.Int64(int64(len(f.Data))),
		ContentType:   aws.String(s.opts.ContentType()),
		Metadata:      map[string]string{"kollect-sha256": f.SHA256},
	}
	s.encrypt(in)
	if _, err := s.client.PutObject(ctx, in); err != nil {
		return classify("writing "+s.key(f.Path), err)
	}
	return nil
}

func (s *Sink) encrypt(in *s3.PutObjectInput) {
	if s.cfg.ServerSideEncryption != "" {
		in.ServerSideEncryption = types.ServerSideEncryption(s.cfg.ServerSideEncryption)
	}
	if s.cfg.KMSKeyID != "" {
		in.SSEKMSKeyId = aws.String(s.cfg.KMSKeyID)
	}
}

// putManifest writes the manifest only if it is still the one read at the start (If-Match),
// or still absent (If-None-Match: *). Stores without conditional writes answer 501, and
// then the write is repeated without the condition.
func (s *Sink) putManifest(ctx context.Context, key string, data []byte, etag string) error {
	in := &s3.PutObjectInput{
		Bucket: &s.cfg.Bucket, Key: &key, Body: bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))), ContentType: aws.String("application/json"),
	}
	s.encrypt(in)
	if etag != "" {
		in.IfMatch = aws.String(etag)
	} else {
		in.IfNoneMatch = aws.String("*")
	}
	_, err := s.client.PutObject(ctx, in)
	switch st := statusOf(err); {
	case err == nil:
		return nil
	case st == http.StatusPreconditionFailed || st == http.StatusConflict:
		return sink.TransientError(fmt.Errorf("writing manifest %s: %w: %v", key, errConflict, err))
	case st == http.StatusNotImplemented:
		in.IfMatch, in.IfNoneMatch = nil, nil
		in.Body = bytes.NewReader(data)
		_, err = s.client.PutObject(ctx, in)
	}
	if err != nil {
		return classify("writing manifest "+key, err)
	}
	return nil
}

// deleteAll removes pruned documents, 1000 keys per request (the API's limit).
func (s *Sink) deleteAll(ctx context.Context, paths []string) error {
	for start := 0; start < len(paths); start += 1000 {
		chunk := paths[start:min(start+1000, len(paths))]
		ids := make([]types.ObjectIdentifier, len(chunk))
		for i, p := range chunk {
			ids[i] = types.ObjectIdentifier{Key: aws.String(s.key(p))}
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.cfg.Bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return classify("deleting pruned documents", err)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			err := fmt.Errorf("deleting %s: %s: %s (and %d more)", aws.ToString(e.Key),
				aws.ToString(e.Code), aws.ToString(e.Message), len(out.Errors)-1)
			if terminalCodes[aws.ToString(e.Code)] {
				// A key the credentials may not delete (AccessDenied) stays refused on retry.
				return sink.TerminalError(err)
			}
			return sink.TransientError(err)
		}
	}
	return nil
}
