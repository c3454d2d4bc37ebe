package snapshot

import (
	"context"
	"sync"

	"kollect.dev/agent/internal/sink"
)

// Uploads bounds the concurrent requests of one export to an object store.
const Uploads = 8

// Parallel calls fn on every item with at most n calls at a time, as the object stores write
// an export's documents (S3, GCS and Azure Blob take one request per object). The first
// error cancels the calls still running and stops the rest; it is returned as fn returned
// it. A context that ends first is a transient error.
func Parallel[T any](ctx context.Context, items []T, n int, fn func(context.Context, *T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan *T)
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for range min(n, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				if err := fn(ctx, it); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		}()
	}
	for i := range items {
		select {
		case work <- &items[i]:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		return sink.TransientError(ctx.Err())
	}
	return firstErr
}
