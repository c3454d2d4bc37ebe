package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// The consumers of one sink object (the workers of the inventories that export to it, and its
// probe) share one connection pool.
//
// Why: each consumer used to build its own pool, and the probe a new one at every probe. A
// PostgreSQL connection costs the server a process start, about 30 ms of its CPU on the
// benchmark's two cores: at an agent's start with 100 tenants, 200 of them (a probe and an
// export per sink) were most of what PostgreSQL spent before the first export.
//
// Pools are shared only within one sink object, with the same spec, the same Secret contents
// and the same egress guard: tenants never share a connection, and a rotated credential or a
// tightened scope gets a new pool. A pool no consumer holds lingers for poolLinger, so that a
// probe just before an inventory builds its sink (or a sink rebuilt at once) keeps the
// connection.
const poolLinger = time.Minute

var pools = poolRegistry{entries: map[string]*pooled{}}

type poolRegistry struct {
	mu      sync.Mutex
	entries map[string]*pooled
}

type pooled struct {
	pool  *pgxpool.Pool
	refs  int
	timer *time.Timer
}

// acquire returns the pool of key, creating it from cfg, and the function that releases it.
func (r *poolRegistry) acquire(key string, cfg *pgxpool.Config) (*pgxpool.Pool, func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.entries[key]
	if p == nil {
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			return nil, nil, err
		}
		p = &pooled{pool: pool}
		r.entries[key] = p
	}
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.refs++
	var once sync.Once
	return p.pool, func() { once.Do(func() { r.release(key, p) }) }, nil
}

func (r *poolRegistry) release(key string, p *pooled) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.refs--
	if p.refs > 0 {
		return
	}
	p.timer = time.AfterFunc(poolLinger, func() {
		r.mu.Lock()
		if p.refs > 0 || r.entries[key] != p {
			r.mu.Unlock()
			return
		}
		delete(r.entries, key)
		r.mu.Unlock()
		p.pool.Close()
	})
}

// poolKey identifies what a pool was built from: the sink object, its spec, the contents of
// the Secrets resolving it read (read records them), and the egress guard it dials through.
func poolKey(env sink.Env, spec *v1alpha1.PostgresSinkConfig, read map[string]map[string][]byte) (string, error) {
	h := sha256.New()
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	h.Write(specJSON)
	names := make([]string, 0, len(read))
	for name := range read {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		data, err := json.Marshal(read[name]) // map keys sorted by encoding/json
		if err != nil {
			return "", err
		}
		h.Write([]byte("\x00" + name + "\x00"))
		h.Write(data)
	}
	h.Write([]byte("\x00" + env.Guard().Fingerprint()))
	return env.Namespace + "/" + env.Name + "/" + hex.EncodeToString(h.Sum(nil)), nil
}

// recordSecrets wraps env's Secret reader so that every Secret read is kept in read (resolve
// reads them one after another).
func recordSecrets(env sink.Env, read map[string]map[string][]byte) sink.Env {
	get := env.Secrets
	if get == nil {
		return env
	}
	env.Secrets = func(ctx context.Context, name string) (map[string][]byte, error) {
		data, err := get(ctx, name)
		if err == nil {
			read[name] = data
		}
		return data, err
	}
	return env
}
