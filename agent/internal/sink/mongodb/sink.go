package mongodb

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// Sink exports inventories into a MongoDB collection. One delivery worker calls it per
// sink. A second agent with the same cluster name is refused by the writer check on the
// state document (writers.go), which, without transactions, cannot catch two first exports
// onto an empty state at the same moment.
type Sink struct {
	env    sink.Env
	dest   string
	client *mongo.Client
	rows   *mongo.Collection
	state  *mongo.Collection
	// coverage holds one document per (cluster, inventory, target): see coverage.go.
	coverage *mongo.Collection

	mu      sync.Mutex
	indexed bool
}

var _ sink.Sink = (*Sink)(nil)

// option adjusts the client options before connecting.
type option func(*options.ClientOptions)

// withMonitor installs a command monitor (operation counting in tests).
func withMonitor(m *event.CommandMonitor) option {
	return func(o *options.ClientOptions) { o.SetMonitor(m) }
}

// New is the mongodb backend's entry in the sink table: it builds the sink from a
// KollectDatabaseSink of type mongodb.
func New(ctx context.Context, obj sink.Object, env sink.Env) (sink.Sink, error) {
	spec, err := sink.DatabaseSpec(obj)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, spec.MongoDB, env)
	if err != nil {
		return nil, err // never a nil *Sink in a non-nil interface
	}
	return s, nil
}

// open builds a sink from its spec. The driver connects in the background, so an unreachable
// server shows up as a transient Export or Probe error.
func open(ctx context.Context, spec *v1alpha1.MongoDBSinkConfig, env sink.Env, opts ...option) (*Sink, error) {
	s, err := resolve(ctx, spec, env)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(s.client)
	}
	client, err := mongo.Connect(s.client)
	if err != nil {
		return nil, sink.Terminalf("mongodb sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	db := client.Database(s.database)
	return &Sink{env: env, dest: s.destination, client: client,
		rows: db.Collection(s.collection), state: db.Collection(s.collection + "_state"),
		coverage: db.Collection(s.collection + "_coverage")}, nil
}

// Close disconnects.
func (s *Sink) Close() error {
	return s.client.Disconnect(context.Background())
}

// indexSpec is one index of the rows collection.
type indexSpec struct {
	name   string
	keys   bson.D
	unique bool
}

// indexes are the identity of a row's version (unique, including the cluster and the
// generation that wrote it: generation.go) and the one the fleet questions filter by.
var indexes = []indexSpec{
	{"kollect_identity_gen", bson.D{{Key: "cluster", Value: 1}, {Key: "inventory", Value: 1}, {Key: "target", Value: 1}, {Key: "uid", Value: 1},
		{Key: "gen", Value: 1}}, true},
	{"kollect_kind", bson.D{{Key: "kind", Value: 1}, {Key: "cluster", Value: 1}, {Key: "namespace", Value: 1}, {Key: "name", Value: 1}}, false},
}

// legacyIndexes are indexes of earlier versions that generations cannot live with:
// kollect_identity, unique on the identity alone, refuses a row's second version. They are
// dropped once their replacement exists.
var legacyIndexes = []string{"kollect_identity"}

func indexModels() []mongo.IndexModel {
	out := make([]mongo.IndexModel, len(indexes))
	for i, ix := range indexes {
		opts := options.Index().SetName(ix.name)
		if ix.unique {
			opts.SetUnique(true)
		}
		out[i] = mongo.IndexModel{Keys: ix.keys, Options: opts}
	}
	return out
}

// ensureIndexes creates the missing indexes once per sink. It lists them first: a restarted
// agent then sends no createIndexes at all, and FerretDB v1 panics on a createIndexes whose
// indexes all exist. createIndexes of equal specifications is idempotent on MongoDB, so two
// agents starting together are fine.
func (s *Sink) ensureIndexes(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.indexed {
		return nil
	}
	missing, legacy, err := s.indexChanges(ctx)
	if err != nil {
		return classify(fmt.Errorf("mongodb sink %s: listing indexes: %w", s.dest, err))
	}
	if len(missing) > 0 {
		if _, err := s.rows.Indexes().CreateMany(ctx, missing); err != nil {
			// Another agent may have created them meanwhile: MongoDB takes that in its stride,
			// FerretDB v1 panics and drops the connection. Either way they exist now.
			if still, _, lerr := s.indexChanges(ctx); lerr != nil || len(still) > 0 {
				return classify(fmt.Errorf("mongodb sink %s: creating indexes: %w", s.dest, err))
			}
		}
	}
	for _, name := range legacy {
		// An agent of an earlier version may create it again when it starts (a rolling
		// upgrade); the export it then refuses resets s.indexed, and this drops it again.
		if err := s.rows.Indexes().DropOne(ctx, name); err != nil && !isNamespaceNotFound(err) {
			return classify(fmt.Errorf("mongodb sink %s: dropping index %s of an earlier version: %w", s.dest, name, err))
		}
		s.env.Log.Info("dropped an index of an earlier version that refuses a row's second version", "index", name)
	}
	s.indexed = true
	return nil
}

// indexChanges lists the index models the collection lacks (all of them when it does not
// exist yet) and the legacy indexes it has.
func (s *Sink) indexChanges(ctx context.Context) ([]mongo.IndexModel, []string, error) {
	specs, err := s.rows.Indexes().ListSpecifications(ctx)
	if isNamespaceNotFound(err) { // no collection yet
		specs, err = nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	have := map[string]bool{}
	for _, sp := range specs {
		have[sp.Name] = true
	}
	var missing []mongo.IndexModel
	for i, m := range indexModels() {
		if !have[indexes[i].name] {
			missing = append(missing, m)
		}
	}
	var legacy []string
	for _, name := range legacyIndexes {
		if have[name] {
			legacy = append(legacy, name)
		}
	}
	return missing, legacy, nil
}

// isNamespaceNotFound reports a command on a collection that does not exist (code 26) or an
// index that does not (27, IndexNotFound: dropped meanwhile by another agent).
func isNamespaceNotFound(err error) bool {
	var cmdErr mongo.CommandError
	return errors.As(err, &cmdErr) && (cmdErr.Code == 26 || cmdErr.Code == 27)
}

// Export writes the batch; see the package documentation for the write order that readers
// see all or nothing of.
func (s *Sink) Export(ctx context.Context, b *sink.Batch) error {
	if err := checkBatch(s.env.Cluster, b); err != nil {
		return err
	}
	if err := s.ensureIndexes(ctx); err != nil {
		return err
	}
	w := &writer{rows: s.rows, state: s.state, coverage: s.coverage, cluster: b.Envelope.Cluster, inventory: b.Envelope.Inventory, log: s.env.Log}
	if err := w.export(ctx, b); err != nil {
		if onlyDuplicateKeys(err) {
			// A version's _id names its generation, so only an index of an earlier version
			// can refuse it: check the indexes again before the retry.
			s.mu.Lock()
			s.indexed = false
			s.mu.Unlock()
		}
		return classify(fmt.Errorf("mongodb sink %s: exporting %s/%s: %w", s.dest, b.Envelope.Cluster, b.Envelope.Inventory, err))
	}
	if w.outcome != nil {
		return fmt.Errorf("mongodb sink %s: %w", s.dest, w.outcome)
	}
	return nil
}

// checkBatch refuses rows of another cluster or inventory: every delete is bounded by the
// envelope's cluster and inventory, and a stray row would escape that bound.
func checkBatch(cluster string, b *sink.Batch) error {
	env := &b.Envelope
	if env.Cluster == "" || env.Inventory == "" {
		return sink.Terminalf("mongodb sink: envelope without cluster or inventory")
	}
	if cluster != "" && env.Cluster != cluster {
		return sink.Terminalf("mongodb sink: envelope of cluster %q sent to the sink of cluster %q", env.Cluster, cluster)
	}
	for _, rows := range [][]export.Row{env.Rows, b.Diff.Added, b.Diff.Changed, b.Diff.Deleted} {
		for i := range rows {
			if rows[i].Cluster != env.Cluster || rows[i].Inventory != env.Inventory {
				return sink.Terminalf("mongodb sink: row %s does not belong to %s/%s", rows[i].Key(), env.Cluster, env.Inventory)
			}
		}
	}
	return nil
}

var _ sink.Confirmer = (*Sink)(nil)

// Confirm sets the state document's confirmed_at and writer (agent_version, agent_instance),
// and nothing else, when it still holds the confirmed checksum and no export is half done (no
// pending mark): one updateOne, no row written. Otherwise it is sink.ErrNotHeld. It reads the
// state first for the writer check: another agent's state refuses it, as it refuses an export.
func (s *Sink) Confirm(ctx context.Context, c sink.Confirmation) error {
	w := &writer{state: s.state, cluster: c.Cluster, inventory: c.Inventory, log: s.env.Log}
	st, err := w.readState(ctx)
	if err != nil {
		return classify(fmt.Errorf("mongodb sink %s: confirming %s/%s: %w", s.dest, c.Cluster, c.Inventory, err))
	}
	if st != nil {
		check := w.check(st, c.Writer, c.At, c.ConflictWindow)
		if refusal := check.Refusal(); refusal != nil {
			if err := w.markContender(ctx, c.Writer, c.At); err != nil {
				return classify(fmt.Errorf("mongodb sink %s: confirming %s/%s: %w", s.dest, c.Cluster, c.Inventory, err))
			}
			return fmt.Errorf("mongodb sink %s: %w", s.dest, refusal)
		}
		if st.Checksum == c.Checksum && st.Pending == "" {
			w.takeover(check, st)
		}
		w.outcome = check.Contention()
	}
	res, err := s.state.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: stateID(c.Cluster, c.Inventory)}, {Key: "checksum", Value: c.Checksum}, {Key: "pending", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "confirmed_at", Value: bson.NewDateTimeFromTime(c.At)},
			{Key: "agent_version", Value: c.Writer.Version}, {Key: "agent_instance", Value: c.Writer.Instance}}}})
	if err != nil {
		return classify(fmt.Errorf("mongodb sink %s: confirming %s/%s: %w", s.dest, c.Cluster, c.Inventory, err))
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("mongodb sink %s: the state of %s/%s does not hold checksum %s: %w", s.dest, c.Cluster, c.Inventory,
			export.ShortChecksum(c.Checksum), sink.ErrNotHeld)
	}
	if w.outcome != nil {
		return fmt.Errorf("mongodb sink %s: %w", s.dest, w.outcome)
	}
	return nil
}
