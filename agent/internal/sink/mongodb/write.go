package mongodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// writer applies one batch.
type writer struct {
	rows, state        *mongo.Collection
	coverage           *mongo.Collection
	cluster, inventory string
	log                logr.Logger
	// outcome is the writer conflict Export returns: a refusal (only the contender mark was
	// written) or the contention of a successful export.
	outcome error
}

// stateDoc is a (cluster, inventory) state document.
type stateDoc struct {
	Checksum  string `bson:"checksum"`
	ItemCount int64  `bson:"item_count"`
	// Pending is the checksum of an export that started writing rows and has not finished.
	Pending    string        `bson:"pending,omitempty"`
	ExportedAt bson.DateTime `bson:"exported_at"`
	// ConfirmedAt is when the agent last confirmed Checksum is still the cluster's current
	// snapshot (an export confirms too); absent in states written before confirmations.
	ConfirmedAt bson.DateTime `bson:"confirmed_at,omitempty"`
	// AgentVersion and AgentInstance name the agent of the last export or confirmation
	// (export.Writer); absent in states written before provenance. Rows never carry them, so
	// that an agent upgrade rewrites no row.
	AgentVersion  string `bson:"agent_version,omitempty"`
	AgentInstance string `bson:"agent_instance,omitempty"`
	// ContenderVersion, ContenderInstance and ContendedAt are the contender mark: the last
	// other agent (same cluster name) whose write was refused, and when. Absent when none.
	ContenderVersion  string        `bson:"contender_version,omitempty"`
	ContenderInstance string        `bson:"contender_instance,omitempty"`
	ContendedAt       bson.DateTime `bson:"contended_at,omitempty"`
}

type mode int

const (
	modeUnchanged mode = iota
	modeDiff
	modeFull
)

func decide(st *stateDoc, b *sink.Batch) mode {
	switch {
	case st == nil || st.Pending != "" || b.Resync:
		return modeFull
	case st.Checksum == b.Envelope.Checksum:
		return modeUnchanged
	case st.Checksum == b.PreviousChecksum && !b.Diff.Full:
		return modeDiff
	default:
		return modeFull
	}
}

func (w *writer) export(ctx context.Context, b *sink.Batch) error {
	id := stateID(w.cluster, w.inventory)
	st, err := w.readState(ctx)
	if err != nil {
		return err
	}
	at := b.Envelope.ExportedAt
	if at.IsZero() {
		at = time.Now()
	}
	check := w.check(st, b.Envelope.Writer, at, b.ConflictWindow)
	if refusal := check.Refusal(); refusal != nil {
		w.outcome = refusal
		return w.markContender(ctx, b.Envelope.Writer, at)
	}
	takeover := w.takeover(check, st)
	w.outcome = check.Contention()
	storedCov, err := w.readCoverage(ctx)
	if err != nil {
		return err
	}
	cov := batchCoverage(&b.Envelope)
	covChanged := !slices.Equal(storedCov, cov)
	now := bson.NewDateTimeFromTime(time.Now())
	m := decide(st, b)
	if m == modeUnchanged {
		if !covChanged {
			if takeover {
				// The same rows (two empty inventories), another writer: the state says so.
				return w.touchState(ctx, &b.Envelope, export.Complete(cov))
			}
			return nil
		}
		// Only the coverage changed (a target turned forbidden, its rows kept): no row is
		// written. Coverage documents are idempotent, so no pending mark is needed either.
		if err := w.saveCoverage(ctx, storedCov, cov, now); err != nil {
			return err
		}
		return w.touchState(ctx, &b.Envelope, export.Complete(cov))
	}
	var models []mongo.WriteModel
	if m == modeDiff {
		models, err = w.diffModels(b, now)
	} else {
		models, err = w.reconcileModels(ctx, b.Envelope.Rows, now)
	}
	if err != nil {
		return err
	}
	if len(models) == 0 && st != nil && st.Pending == "" && st.Checksum == b.Envelope.Checksum {
		// A resync that found no row to repair.
		if !covChanged {
			return nil
		}
		if err := w.saveCoverage(ctx, storedCov, cov, now); err != nil {
			return err
		}
		return w.touchState(ctx, &b.Envelope, export.Complete(cov))
	}
	// 1. Mark the export pending before touching rows.
	if _, err := w.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cluster", Value: w.cluster}, {Key: "inventory", Value: w.inventory},
			{Key: "pending", Value: b.Envelope.Checksum}}}},
		options.UpdateOne().SetUpsert(true)); err != nil {
		return fmt.Errorf("marking the export pending: %w", err)
	}
	// 2. Rows.
	if err := w.bulk(ctx, models); err != nil {
		if m != modeDiff || !onlyDuplicateKeys(err) {
			return err
		}
		// The diff's idea of the stored rows was wrong (an added key existed): the unordered
		// bulk applied everything else, and a full reconcile repairs the rest.
		if models, err = w.reconcileModels(ctx, b.Envelope.Rows, now); err != nil {
			return err
		}
		if err := w.bulk(ctx, models); err != nil {
			return err
		}
	}
	// 3. The coverage, beside the rows: an interruption before step 4 leaves the pending mark,
	// and the next export compares the coverage again.
	if covChanged {
		if err := w.saveCoverage(ctx, storedCov, cov, now); err != nil {
			return err
		}
	}
	// 4. The new state, last.
	set := bson.D{{Key: "checksum", Value: b.Envelope.Checksum},
		{Key: "item_count", Value: int64(len(b.Envelope.Rows))}, {Key: "exported_at", Value: bson.NewDateTimeFromTime(at)},
		{Key: "agent_version", Value: b.Envelope.Writer.Version}, {Key: "agent_instance", Value: b.Envelope.Writer.Instance}}
	confirm := bson.E{Key: "confirmed_at", Value: bson.NewDateTimeFromTime(at)}
	update := bson.D{{Key: "$set", Value: append(set, confirm)}, {Key: "$unset", Value: bson.D{{Key: "pending", Value: ""}}}}
	if !export.Complete(cov) {
		// Kept rows of a target the agent cannot see are not confirmed current: confirmed_at
		// stays as it was (absent from a state never confirmed), as the delivery worker's
		// confirmation does.
		update = bson.D{{Key: "$set", Value: set}, {Key: "$unset", Value: bson.D{{Key: "pending", Value: ""}}}}
	}
	if _, err := w.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update); err != nil {
		return fmt.Errorf("saving state: %w", err)
	}
	return nil
}

// bulkChunk bounds the operations of one bulk write, so one command stays small (measured on
// FerretDB: commands of 1,000 inserts load no faster).
const bulkChunk = 100

// updateChunk bounds the update operations of one bulk write. FerretDB v1 keeps every
// update's query open until its whole update command ends, and each open query holds one
// pooled connection (100 on the SQLite backend, 50 on the PostgreSQL one): the update that
// needs one more than the pool has waits forever, and the server stops answering writes
// (reproduced with 100 plain updateOne by _id on SQLite; 99 pass). 25 leaves room on both
// backends for the writes and other clients; on MongoDB smaller update commands only cost a
// few round trips.
const updateChunk = 25

// bulk runs models as unordered bulk writes of at most bulkChunk operations, of which at most
// updateChunk updates. Every chunk runs even when one fails, like a single unordered bulk
// write; the errors are joined.
func (w *writer) bulk(ctx context.Context, models []mongo.WriteModel) error {
	return w.bulkInto(ctx, w.rows, models)
}

// bulkInto is bulk into another collection than the rows.
func (w *writer) bulkInto(ctx context.Context, coll *mongo.Collection, models []mongo.WriteModel) error {
	var errs []error
	for start := 0; start < len(models); {
		end, updates := start, 0
		for end < len(models) && end-start < bulkChunk {
			if _, ok := models[end].(*mongo.UpdateOneModel); ok {
				if updates == updateChunk {
					break
				}
				updates++
			}
			end++
		}
		chunk := models[start:end]
		if _, err := coll.BulkWrite(ctx, chunk, options.BulkWrite().SetOrdered(false)); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("writing row operations %d-%d of %d: %w", start, end, len(models), err)
			}
			errs = append(errs, err)
		}
		start = end
	}
	if len(errs) > 0 {
		return fmt.Errorf("writing %d row operations: %w", len(models), errors.Join(errs...))
	}
	return nil
}

// onlyDuplicateKeys reports bulk writes whose every failure is a duplicate key.
func onlyDuplicateKeys(err error) bool {
	var causes []error
	if joined, ok := errors.Unwrap(err).(interface{ Unwrap() []error }); ok {
		causes = joined.Unwrap()
	} else {
		causes = []error{err}
	}
	for _, c := range causes {
		var bwe mongo.BulkWriteException
		if !errors.As(c, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
			return false
		}
		for _, e := range bwe.WriteErrors {
			if e.Code != 11000 {
				return false
			}
		}
	}
	return len(causes) > 0
}

// upsertModel writes a row by _id, keeping first_seen of an existing document.
func upsertModel(r *export.Row, now bson.DateTime) (mongo.WriteModel, error) {
	fields, err := rowFields(r)
	if err != nil {
		return nil, err
	}
	fields = append(fields, bson.E{Key: "updated_at", Value: now})
	return mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: rowID(r)}}).SetUpsert(true).
		SetUpdate(bson.D{{Key: "$set", Value: fields}, {Key: "$setOnInsert", Value: bson.D{{Key: "first_seen", Value: now}}}}), nil
}

// insertModel writes a row known to be new.
func insertModel(r *export.Row, now bson.DateTime) (mongo.WriteModel, error) {
	fields, err := rowFields(r)
	if err != nil {
		return nil, err
	}
	doc := append(bson.D{{Key: "_id", Value: rowID(r)}}, fields...)
	doc = append(doc, bson.E{Key: "first_seen", Value: now}, bson.E{Key: "updated_at", Value: now})
	return mongo.NewInsertOneModel().SetDocument(doc), nil
}

// deleteChunk bounds the _id list of one deleteMany.
const deleteChunk = 1000

// deleteModels removes rows by _id with one deleteMany per chunk: MongoDB serves an _id $in
// from the primary key, and FerretDB scans the collection once per delete command instead of
// once per key (measured: 100 deleteOne take ~6x longer than one deleteMany of 100 on 5k
// documents). The filter repeats cluster and inventory so that no _id can ever reach another
// cluster's document.
func (w *writer) deleteModels(ids []string) []mongo.WriteModel {
	var out []mongo.WriteModel
	for start := 0; start < len(ids); start += deleteChunk {
		chunk := ids[start:min(start+deleteChunk, len(ids))]
		in := make(bson.A, len(chunk))
		for i, id := range chunk {
			in[i] = id
		}
		out = append(out, mongo.NewDeleteManyModel().SetFilter(bson.D{
			{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}},
			{Key: "cluster", Value: w.cluster}, {Key: "inventory", Value: w.inventory}}))
	}
	return out
}

// diffModels inserts added rows (an upsert of a missing key costs FerretDB a collection scan;
// a plain insert does not) and upserts changed ones. An added key that exists after all fails
// with a duplicate key error, which Export answers with a full reconcile.
func (w *writer) diffModels(b *sink.Batch, now bson.DateTime) ([]mongo.WriteModel, error) {
	models := make([]mongo.WriteModel, 0, len(b.Diff.Added)+len(b.Diff.Changed)+1)
	for i := range b.Diff.Added {
		m, err := insertModel(&b.Diff.Added[i], now)
		if err != nil {
			return nil, err
		}
		models = append(models, m)
	}
	for i := range b.Diff.Changed {
		m, err := upsertModel(&b.Diff.Changed[i], now)
		if err != nil {
			return nil, err
		}
		models = append(models, m)
	}
	ids := make([]string, len(b.Diff.Deleted))
	for i := range b.Diff.Deleted {
		ids[i] = rowID(&b.Diff.Deleted[i])
	}
	return append(models, w.deleteModels(ids)...), nil
}

// reconcileModels compares the snapshot with the stored _id and digest of this cluster and
// inventory and returns only the writes that differ: inserts, updates of changed rows and
// deletes of rows the snapshot no longer holds.
func (w *writer) reconcileModels(ctx context.Context, rows []export.Row, now bson.DateTime) ([]mongo.WriteModel, error) {
	cur, err := w.rows.Find(ctx, bson.D{{Key: "cluster", Value: w.cluster}, {Key: "inventory", Value: w.inventory}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "digest", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("reading stored rows: %w", err)
	}
	stored := map[string]string{}
	for cur.Next(ctx) {
		var d struct {
			ID     string `bson:"_id"`
			Digest string `bson:"digest"`
		}
		if err := cur.Decode(&d); err != nil {
			_ = cur.Close(ctx)
			return nil, fmt.Errorf("reading stored rows: %w", err)
		}
		stored[d.ID] = d.Digest
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("reading stored rows: %w", err)
	}
	_ = cur.Close(ctx)
	var models []mongo.WriteModel
	for i := range rows {
		r := &rows[i]
		id := rowID(r)
		old, ok := stored[id]
		delete(stored, id)
		var m mongo.WriteModel
		switch {
		case !ok:
			m, err = insertModel(r, now)
		case old != digest(r):
			m, err = upsertModel(r, now)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		models = append(models, m)
	}
	stale := make([]string, 0, len(stored))
	for id := range stored {
		stale = append(stale, id)
	}
	slices.Sort(stale)
	return append(models, w.deleteModels(stale)...), nil
}
