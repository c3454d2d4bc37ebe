package gcs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/snapshot"
)

// singleRequestLimit: smaller objects go up in one request rather than a resumable session.
const singleRequestLimit = 16 << 20

// Stats counts what the latest export did.
type Stats = snapshot.Publication

// LastStats describes the latest successful export.
func (s *Sink) LastStats() Stats { return s.last }

var errConflict = errors.New("manifest changed concurrently")

func isDone(err error) bool { return errors.Is(err, iterator.Done) }

// Export writes the documents that changed, then the manifest, then prunes.
func (s *Sink) Export(ctx context.Context, b *sink.Batch) error {
	manifestKey := s.key(snapshot.ManifestPath(b.Envelope.Cluster, b.Envelope.Inventory))
	st, err := snapshot.Publish[int64](ctx, s.opts, objects{s}, manifestKey, b)
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
	return snapshot.Confirm[int64](ctx, objects{s}, s.key(snapshot.ManifestPath(c.Cluster, c.Inventory)), c)
}

// objects gives snapshot.Publish the bucket operations of the sink.
type objects struct{ s *Sink }

func (o objects) ReadManifest(ctx context.Context, key string) (*snapshot.Manifest, int64, error) {
	return o.s.readManifest(ctx, key)
}
func (o objects) ListOwned(ctx context.Context, m *snapshot.Matcher) ([]string, error) {
	return o.s.listOwned(ctx, m)
}
func (o objects) PutAll(ctx context.Context, files []snapshot.File) error {
	return o.s.putAll(ctx, files)
}
func (o objects) PutManifest(ctx context.Context, key string, data []byte, v int64) error {
	return o.s.putManifest(ctx, key, data, v)
}
func (o objects) DeleteAll(ctx context.Context, paths []string) error {
	return o.s.deleteAll(ctx, paths)
}

func (s *Sink) readManifest(ctx context.Context, key string) (*snapshot.Manifest, int64, error) {
	r, err := s.bucket.Object(key).NewReader(ctx)
	if errors.Is(err, storage.ErrObjectNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, classify("reading manifest "+key, err)
	}
	defer r.Close()
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, 0, sink.TransientError(fmt.Errorf("reading manifest %s: %w", key, err))
	}
	m, err := snapshot.ParseManifest(raw)
	if err != nil {
		s.env.Log.Info("ignoring unreadable manifest", "key", key, "error", err.Error())
		return nil, r.Attrs.Generation, nil
	}
	return m, r.Attrs.Generation, nil
}

func (s *Sink) listOwned(ctx context.Context, m *snapshot.Matcher) ([]string, error) {
	var paths []string
	it := s.bucket.Objects(ctx, &storage.Query{Prefix: s.prefix + m.Prefix})
	for {
		attrs, err := it.Next()
		if isDone(err) {
			return paths, nil
		}
		if err != nil {
			return nil, classify("listing gs://"+s.cfg.Bucket+"/"+s.prefix+m.Prefix, err)
		}
		if path := attrs.Name[len(s.prefix):]; m.Match(path) {
			paths = append(paths, path)
		}
	}
}

func (s *Sink) putAll(ctx context.Context, files []snapshot.File) error {
	return snapshot.Parallel(ctx, files, snapshot.Uploads, func(ctx context.Context, f *snapshot.File) error {
		if err := s.write(ctx, s.bucket.Object(s.key(f.Path)), f.Data, s.opts.ContentType(), f.SHA256); err != nil {
			return classify("writing "+s.key(f.Path), err)
		}
		return nil
	})
}

func (s *Sink) write(ctx context.Context, obj *storage.ObjectHandle, data []byte, contentType, sum string) error {
	w := obj.NewWriter(ctx)
	w.ContentType = contentType
	if sum != "" {
		w.Metadata = map[string]string{"kollect-sha256": sum}
	}
	if len(data) < singleRequestLimit {
		w.ChunkSize = 0
	}
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}

// putManifest writes the manifest only if its generation is still the one read (or it is
// still absent).
func (s *Sink) putManifest(ctx context.Context, key string, data []byte, gen int64) error {
	cond := storage.Conditions{DoesNotExist: true}
	if gen != 0 {
		cond = storage.Conditions{GenerationMatch: gen}
	}
	err := s.write(ctx, s.bucket.Object(key).If(cond), data, "application/json", "")
	if st := statusOf(err); st == http.StatusPreconditionFailed || st == http.StatusConflict {
		return sink.TransientError(fmt.Errorf("writing manifest %s: %w: %v", key, errConflict, err))
	}
	if err != nil {
		return classify("writing manifest "+key, err)
	}
	return nil
}

// deleteAll removes pruned documents; one already gone is fine.
func (s *Sink) deleteAll(ctx context.Context, paths []string) error {
	for _, p := range paths {
		if err := s.bucket.Object(s.key(p)).Delete(ctx); err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
			return classify("deleting "+s.key(p), err)
		}
	}
	return nil
}
