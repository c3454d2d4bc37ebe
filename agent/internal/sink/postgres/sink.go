package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// Sink exports inventories into PostgreSQL. It is safe for concurrent use; exports of one
// (cluster, inventory) are serialised by an advisory lock in the database, so even two agents
// misconfigured with the same cluster name cannot interleave.
type Sink struct {
	env   sink.Env
	names names
	dest  string
	// user is the role the sink logs in as, for the message of a row-level security refusal.
	user string
	// pool begins every transaction with the sink's statement timeout (pooling.go).
	pool txPool
	// release gives the pool back (Close).
	release func()

	// migrated is set once the schema is current; until then every Export retries migrating.
	mu       sync.Mutex
	migrated bool
	// history is spec.postgres.history; seeded holds the inventories whose history this sink
	// brought up to the rows (once per inventory: the first export or confirmation).
	history bool
	seeded  map[string]bool
}

var _ sink.Sink = (*Sink)(nil)

// option adjusts a sink before its pool is created.
type option func(*pgxpool.Config)

// withTracer installs a pgx tracer on every connection (statement counting in tests).
func withTracer(t pgx.QueryTracer) option {
	return func(c *pgxpool.Config) { c.ConnConfig.Tracer = t }
}

// New is the postgres backend's entry in the sink table: it builds the sink from a
// KollectDatabaseSink of type postgres.
func New(ctx context.Context, obj sink.Object, env sink.Env) (sink.Sink, error) {
	spec, err := sink.DatabaseSpec(obj)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, spec.Postgres, env)
	if err != nil {
		return nil, err // never a nil *Sink in a non-nil interface
	}
	return s, nil
}

// open builds a sink from its spec. It does not connect: the pool dials on first use, so an
// unreachable database surfaces as a transient Export or Probe error rather than a failure to
// build the sink.
func open(ctx context.Context, spec *v1alpha1.PostgresSinkConfig, env sink.Env, opts ...option) (*Sink, error) {
	read := map[string]map[string][]byte{}
	s, err := resolve(ctx, spec, recordSecrets(env, read))
	if err != nil {
		return nil, err
	}
	n := names{schema: s.schema, table: s.table}
	if err := n.validate(); err != nil {
		return nil, sink.Terminalf("postgres sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	var pool *pgxpool.Pool
	var release func()
	if len(opts) > 0 {
		// A sink with options of its own (a test's statement tracer) keeps its pool to itself.
		for _, o := range opts {
			o(s.poolConfig)
		}
		if pool, err = pgxpool.NewWithConfig(ctx, s.poolConfig); err == nil {
			release = pool.Close
		}
	} else {
		var key string
		if key, err = poolKey(env, spec, read); err == nil {
			pool, release, err = pools.acquire(key, s.poolConfig)
		}
	}
	if err != nil {
		return nil, sink.Terminalf("postgres sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	return &Sink{env: env, names: n, dest: s.destination, user: s.poolConfig.ConnConfig.User, pool: txPool{Pool: pool, begin: s.begin},
		release: release, history: spec.History, seeded: map[string]bool{}}, nil
}

// Close releases the pool (shared with the sink object's other consumers, see pools.go).
func (s *Sink) Close() error {
	s.release()
	return nil
}

// ensureSchema runs the migrations once per sink, and once per destination in this process:
// the sinks of every tenant that write one table share the check (see destinationSchema).
func (s *Sink) ensureSchema(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.migrated {
		return nil
	}
	ds := destinationSchemaOf(s.dest)
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if !ds.current {
		applied, err := migrate(ctx, s.pool, s.names)
		if err != nil {
			return s.stepError("migrating the schema", err)
		}
		if applied > 0 {
			s.env.Log.Info("migrated the postgres schema", "destination", s.dest, "migrations", applied)
		}
		ds.current = true
	}
	s.migrated = true
	return nil
}

// destinationSchema is what this process knows of one destination's schema (server,
// database, schema and table).
//
// Why: at an agent's start every inventory's first export comes at once, as soon as the
// watches sync. With a sink per tenant on one shared table, each sink used to check the
// migrations in a transaction under the database-wide migration lock, one after another:
// 100 tenants queued 100 transactions on that lock before the first rows were written. The
// first sink of a destination now migrates (or finds the schema current) and the others
// wait for it in the process and then skip the check. A missing table found by an export
// makes the destination unknown again (forgetSchema).
type destinationSchema struct {
	mu      sync.Mutex
	current bool
}

var destinationSchemas sync.Map // destination → *destinationSchema

func destinationSchemaOf(dest string) *destinationSchema {
	ds, _ := destinationSchemas.LoadOrStore(dest, &destinationSchema{})
	return ds.(*destinationSchema)
}

// forgetSchema makes every sink of this process check dest's migrations again.
func forgetSchema(dest string) {
	ds := destinationSchemaOf(dest)
	ds.mu.Lock()
	ds.current = false
	ds.mu.Unlock()
}

// Export writes the batch in one transaction; see the package documentation for the three
// paths. It is idempotent: re-sending a batch that was committed finds the checksum in the
// state table and writes nothing.
func (s *Sink) Export(ctx context.Context, b *sink.Batch) error {
	env := &b.Envelope
	if err := checkBatch(s.env.Cluster, b); err != nil {
		return err
	}
	if err := s.ensureSchema(ctx); err != nil {
		return err
	}
	w := &writer{n: s.names, cluster: env.Cluster, inventory: env.Inventory, log: s.env.Log}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		w.tx, w.outcome, w.hist = tx, nil, s.historyOf(env.Inventory)
		return w.export(ctx, b)
	})
	if err == nil {
		s.committedHistory(env.Inventory, w.hist)
	}
	if err != nil {
		if missingObject(err) {
			// Someone dropped the schema or a table under us: migrate again on the next try.
			s.mu.Lock()
			s.migrated, s.seeded = false, map[string]bool{}
			s.mu.Unlock()
			forgetSchema(s.dest)
			return sink.TransientError(fmt.Errorf("postgres sink %s: exporting %s/%s: %w", s.dest, env.Cluster, env.Inventory, err))
		}
		return s.stepError(fmt.Sprintf("exporting %s/%s", env.Cluster, env.Inventory), s.refusedCluster(env.Cluster, err))
	}
	if w.outcome != nil {
		// Committed: the refused export's contender mark, or the contended export's rows.
		return fmt.Errorf("postgres sink %s: %w", s.dest, w.outcome)
	}
	return nil
}

// missingObject reports an undefined table or schema.
func missingObject(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000")
}

// checkBatch refuses rows of another cluster or inventory: every delete is bounded by the
// envelope's cluster and inventory, and a stray row would escape that bound.
func checkBatch(cluster string, b *sink.Batch) error {
	env := &b.Envelope
	if env.Cluster == "" || env.Inventory == "" {
		return sink.Terminalf("postgres sink: envelope without cluster or inventory")
	}
	if cluster != "" && env.Cluster != cluster {
		return sink.Terminalf("postgres sink: envelope of cluster %q sent to the sink of cluster %q", env.Cluster, cluster)
	}
	check := func(rows []export.Row) error {
		for i := range rows {
			if rows[i].Cluster != env.Cluster || rows[i].Inventory != env.Inventory {
				return sink.Terminalf("postgres sink: row %s does not belong to %s/%s", rows[i].Key(), env.Cluster, env.Inventory)
			}
		}
		return nil
	}
	for _, rows := range [][]export.Row{env.Rows, b.Diff.Added, b.Diff.Changed, b.Diff.Deleted} {
		if err := check(rows); err != nil {
			return err
		}
	}
	return nil
}

var _ sink.Confirmer = (*Sink)(nil)

// Confirm moves the state row's confirmed_at (and the writer), and nothing else, when the row
// still holds the confirmed checksum: one small UPDATE under the export lock, no row written. A
// state row with another checksum, or none, is sink.ErrNotHeld: the agent exports again in
// full. A state another agent holds refuses it, as it refuses an export.
func (s *Sink) Confirm(ctx context.Context, c sink.Confirmation) error {
	if err := s.ensureSchema(ctx); err != nil {
		return err
	}
	w := &writer{n: s.names, cluster: c.Cluster, inventory: c.Inventory, log: s.env.Log}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		w.tx, w.outcome, w.hist = tx, nil, s.historyOf(c.Inventory)
		return w.confirm(ctx, c)
	})
	if err == nil {
		s.committedHistory(c.Inventory, w.hist)
	}
	switch {
	case errors.Is(err, sink.ErrNotHeld):
		return fmt.Errorf("postgres sink %s: the state of %s/%s does not hold checksum %s: %w", s.dest, c.Cluster, c.Inventory,
			export.ShortChecksum(c.Checksum), sink.ErrNotHeld)
	case err != nil:
		return s.stepError(fmt.Sprintf("confirming %s/%s", c.Cluster, c.Inventory), s.refusedCluster(c.Cluster, err))
	case w.outcome != nil:
		return fmt.Errorf("postgres sink %s: %w", s.dest, w.outcome)
	}
	return nil
}

// historyOf is the history part of a writer of inventory.
func (s *Sink) historyOf(inventory string) history {
	s.mu.Lock()
	defer s.mu.Unlock()
	return history{on: s.history, seed: !s.seeded[inventory]}
}

// committedHistory remembers an inventory whose history a committed transaction seeded.
func (s *Sink) committedHistory(inventory string, h history) {
	if !h.seeded {
		return
	}
	s.mu.Lock()
	s.seeded[inventory] = true
	s.mu.Unlock()
}
