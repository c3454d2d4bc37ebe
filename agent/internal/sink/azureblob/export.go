package azureblob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/snapshot"
)

// metadataSHA256 names the blob metadata holding a document's content hash (Azure metadata
// names are C# identifiers: no hyphen).
const metadataSHA256 = "kollect_sha256"

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
	st, err := snapshot.Publish[azcore.ETag](ctx, s.opts, objects{s}, manifestKey, b)
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
	return snapshot.Confirm[azcore.ETag](ctx, objects{s}, s.key(snapshot.ManifestPath(c.Cluster, c.Inventory)), c)
}

// objects gives snapshot.Publish the container operations of the sink.
type objects struct{ s *Sink }

func (o objects) ReadManifest(ctx context.Context, key string) (*snapshot.Manifest, azcore.ETag, error) {
	return o.s.readManifest(ctx, key)
}
func (o objects) ListOwned(ctx context.Context, m *snapshot.Matcher) ([]string, error) {
	return o.s.listOwned(ctx, m)
}
func (o objects) PutAll(ctx context.Context, files []snapshot.File) error {
	return snapshot.Parallel(ctx, files, snapshot.Uploads, o.s.put)
}
func (o objects) PutManifest(ctx context.Context, key string, data []byte, etag azcore.ETag) error {
	return o.s.putManifest(ctx, key, data, etag)
}
func (o objects) DeleteAll(ctx context.Context, paths []string) error {
	return o.s.deleteAll(ctx, paths)
}

// readManifest returns the manifest blob at key (a full name) and its ETag; none is nil.
func (s *Sink) readManifest(ctx context.Context, key string) (*snapshot.Manifest, azcore.ETag, error) {
	resp, err := s.container.NewBlobClient(key).DownloadStream(ctx, nil)
	if bloberror.HasCode(err, bloberror.BlobNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", classify("reading manifest "+s.blobURL(key), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", sink.TransientError(fmt.Errorf("reading manifest %s: %w", key, scrub(err)))
	}
	var etag azcore.ETag
	if resp.ETag != nil {
		etag = *resp.ETag
	}
	m, err := snapshot.ParseManifest(raw)
	if err != nil {
		// A manifest we cannot read is replaced, and the listing finds stale blobs.
		s.env.Log.Info("ignoring unreadable manifest", "key", key, "error", err.Error())
		return nil, etag, nil
	}
	return m, etag, nil
}

// listOwned lists the stored paths the matcher owns.
func (s *Sink) listOwned(ctx context.Context, m *snapshot.Matcher) ([]string, error) {
	listed, err := s.list(ctx, m.Prefix, false)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, p := range listed {
		if m.Match(p) {
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// list lists the stored paths under prefix (relative to the sink's prefix); shallow lists
// only those without a further "/" after the prefix.
func (s *Sink) list(ctx context.Context, prefix string, shallow bool) ([]string, error) {
	full := s.prefix + prefix
	var names []string
	add := func(items []*container.BlobItem) {
		for _, it := range items {
			if it.Name != nil {
				names = append(names, (*it.Name)[len(s.prefix):])
			}
		}
	}
	if shallow {
		p := s.container.NewListBlobsHierarchyPager("/", &container.ListBlobsHierarchyOptions{Prefix: &full})
		for p.More() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return nil, classify("listing "+s.url+"/"+full, err)
			}
			add(page.Segment.BlobItems) // the "directories" are Segment.BlobPrefixes
		}
		return names, nil
	}
	p := s.container.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &full})
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("listing "+s.url+"/"+full, err)
		}
		add(page.Segment.BlobItems)
	}
	return names, nil
}

// upload writes one block blob in a single request, under the access conditions given.
func (s *Sink) upload(ctx context.Context, key string, data []byte, contentType string, meta map[string]*string, cond *blob.AccessConditions) error {
	_, err := s.container.NewBlockBlobClient(key).Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), &blockblob.UploadOptions{
		HTTPHeaders:      &blob.HTTPHeaders{BlobContentType: &contentType},
		Metadata:         meta,
		AccessConditions: cond,
	})
	return err
}

func (s *Sink) put(ctx context.Context, f *snapshot.File) error {
	sum := f.SHA256
	if err := s.upload(ctx, s.key(f.Path), f.Data, s.opts.ContentType(), map[string]*string{metadataSHA256: &sum}, nil); err != nil {
		return classify("writing "+s.blobURL(s.key(f.Path)), err)
	}
	return nil
}

// putManifest writes the manifest only if it is still the one read at the start (If-Match
// on its ETag), or still absent (If-None-Match: *).
func (s *Sink) putManifest(ctx context.Context, key string, data []byte, etag azcore.ETag) error {
	cond := &blob.ModifiedAccessConditions{}
	if etag != "" {
		cond.IfMatch = &etag
	} else {
		absent := azcore.ETagAny
		cond.IfNoneMatch = &absent
	}
	err := s.upload(ctx, key, data, "application/json", nil, &blob.AccessConditions{ModifiedAccessConditions: cond})
	switch st := statusOf(err); {
	case err == nil:
		return nil
	case st == http.StatusPreconditionFailed || st == http.StatusConflict:
		// 412 ConditionNotMet for If-Match, 409 BlobAlreadyExists for If-None-Match.
		return sink.TransientError(fmt.Errorf("writing manifest %s: %w (%s)", key, errConflict, codeOf(err)))
	}
	return classify("writing manifest "+s.blobURL(key), err)
}

// deleteAll removes pruned documents, a few at a time; one already gone is fine.
func (s *Sink) deleteAll(ctx context.Context, paths []string) error {
	return snapshot.Parallel(ctx, paths, snapshot.Uploads, func(ctx context.Context, p *string) error {
		_, err := s.container.NewBlobClient(s.key(*p)).Delete(ctx, nil)
		if err != nil && !bloberror.HasCode(err, bloberror.BlobNotFound) {
			return classify("deleting "+s.blobURL(s.key(*p)), err)
		}
		return nil
	})
}

func codeOf(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return ""
}
