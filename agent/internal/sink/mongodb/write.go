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
	// Generation is the committed generation: the export readers see (generation.go); 0 in
	// states written before generations and until the first export commits.
	Generation int64 `bson:"generation,omitempty"`
	// Pending is the checksum of an export that started writing rows and has not switched the
	// generation: its versions are rolled back by the next export.
	Pending string `bson:"pending,omitempty"`
	// Dirty says that versions the committed generation ended may be left to delete.
	Dirty      bool          `bson:"dirty,omitempty"`
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

// decide picks the export's path from a state whose interrupted export, if any, was rolled
// back: the rows are then exactly the state's checksum.
func decide(st *stateDoc, b *sink.Batch) mode {
	switch {
	case st == nil || b.Resync:
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
	// A pending mark without a generation may be an interrupted export of an earlier version,
	// which wrote rows in place: no rollback restores them, a full reconcile does.
	unrestorable := st != nil && st.Pending != "" && st.Generation == 0
	if err := w.tidy(ctx, st); err != nil {
		return err
	}
	storedCov, err := w.readCoverage(ctx)
	if err != nil {
		return err
	}
	cov := batchCoverage(&b.Envelope)
	now := bson.NewDateTimeFromTime(time.Now())
	m := decide(st, b)
	if m == modeUnchanged {
		return w.unchanged(ctx, &b.Envelope, storedCov, cov, takeover, now)
	}
	if unrestorable {
		m = modeFull
	}
	gen, err := w.nextGeneration(ctx, st)
	if err != nil {
		return err
	}
	var p *plan
	if m == modeDiff {
		p, err = w.diffPlan(ctx, b, gen, now)
	} else {
		p, err = w.fullPlan(ctx, b.Envelope.Rows, gen, now)
	}
	if err != nil {
		return err
	}
	if p.empty() && st != nil && st.Checksum == b.Envelope.Checksum {
		// A resync that found no row to repair.
		return w.unchanged(ctx, &b.Envelope, storedCov, cov, takeover, now)
	}
	return w.write(ctx, b, p, gen, at, storedCov, cov, now)
}

// generation is the state's committed generation, 0 without a state.
func (st *stateDoc) generation() int64 {
	if st == nil {
		return 0
	}
	return st.Generation
}

// nextGeneration is the generation this export writes: the committed one's successor, and,
// while none is committed, one above every version of the inventory: a state that was lost
// or deleted (an operator, an interrupted purge) may have left versions whose _ids the new
// ones must not take.
func (w *writer) nextGeneration(ctx context.Context, st *stateDoc) (int64, error) {
	if g := st.generation(); g > 0 {
		return g + 1, nil
	}
	var d struct {
		Gen int64 `bson:"gen"`
	}
	err := w.rows.FindOne(ctx, w.scoped(bson.E{Key: "gen", Value: bson.D{{Key: "$exists", Value: true}}}),
		options.FindOne().SetSort(bson.D{{Key: "gen", Value: -1}}).SetProjection(bson.D{{Key: "gen", Value: 1}})).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return 1, nil
	case err != nil:
		return 0, fmt.Errorf("reading the highest generation: %w", err)
	}
	return d.Gen + 1, nil
}

// tidy undoes an interrupted export (a pending mark) and deletes versions a committed export
// ended but could not delete, before anything else is read or written; st is updated.
func (w *writer) tidy(ctx context.Context, st *stateDoc) error {
	if st == nil {
		return nil
	}
	if st.Pending != "" {
		if err := w.rollback(ctx, st.Generation); err != nil {
			return err
		}
		st.Pending = ""
	}
	if st.Dirty {
		if err := w.cleanup(ctx, st.Generation); err != nil {
			return err
		}
		st.Dirty = false
	}
	return nil
}

// unchanged finishes an export whose rows the state holds: nothing, or only the coverage that
// changed (a target turned forbidden, its rows kept) and the state's writer. Coverage
// documents are idempotent, so no pending mark is needed either.
func (w *writer) unchanged(ctx context.Context, env *export.Envelope, storedCov, cov []export.Coverage, takeover bool, now bson.DateTime) error {
	if slices.Equal(storedCov, cov) {
		if takeover {
			// The same rows (two empty inventories), another writer: the state says so.
			return w.touchState(ctx, env, export.Complete(cov))
		}
		return nil
	}
	if err := w.saveCoverage(ctx, storedCov, cov, now); err != nil {
		return err
	}
	return w.touchState(ctx, env, export.Complete(cov))
}

// write applies a plan as generation gen: pending mark, new versions, ended versions,
// coverage, the switch of the state's generation, and the deletion of the ended versions.
// Until the switch, readers of the committed generation see none of it.
func (w *writer) write(ctx context.Context, b *sink.Batch, p *plan, gen int64, at time.Time, storedCov, cov []export.Coverage, now bson.DateTime) error {
	id := stateID(w.cluster, w.inventory)
	// 1. Mark the export pending before touching rows: an interruption is rolled back.
	if _, err := w.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cluster", Value: w.cluster}, {Key: "inventory", Value: w.inventory},
			{Key: "pending", Value: b.Envelope.Checksum}}}},
		options.UpdateOne().SetUpsert(true)); err != nil {
		return fmt.Errorf("marking the export pending: %w", err)
	}
	// 2. New versions, then the end of the old ones: neither shows in the committed generation.
	if err := w.bulk(ctx, p.inserts); err != nil {
		return err
	}
	if err := w.bulk(ctx, w.endModels(p.ended, gen)); err != nil {
		return err
	}
	// 3. The coverage, beside the rows (not part of the generation).
	if !slices.Equal(storedCov, cov) {
		if err := w.saveCoverage(ctx, storedCov, cov, now); err != nil {
			return err
		}
	}
	// 4. The switch: one update of one document, which readers see whole or not at all.
	set := bson.D{{Key: "generation", Value: gen}, {Key: "checksum", Value: b.Envelope.Checksum},
		{Key: "item_count", Value: int64(len(b.Envelope.Rows))}, {Key: "exported_at", Value: bson.NewDateTimeFromTime(at)},
		{Key: "agent_version", Value: b.Envelope.Writer.Version}, {Key: "agent_instance", Value: b.Envelope.Writer.Instance}}
	if export.Complete(cov) {
		set = append(set, bson.E{Key: "confirmed_at", Value: bson.NewDateTimeFromTime(at)})
	}
	// Otherwise kept rows of a target the agent cannot see are not confirmed current:
	// confirmed_at stays as it was (absent from a state never confirmed), as the delivery
	// worker's confirmation does.
	if len(p.ended) > 0 {
		set = append(set, bson.E{Key: "dirty", Value: true})
	}
	update := bson.D{{Key: "$set", Value: set}, {Key: "$unset", Value: bson.D{{Key: "pending", Value: ""}}}}
	if _, err := w.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update); err != nil {
		return fmt.Errorf("saving state: %w", err)
	}
	// 5. The ended versions, which no reader of the new generation sees. A failure leaves the
	// dirty mark: the next export, even an unchanged one, deletes them first.
	if len(p.ended) > 0 {
		return w.cleanup(ctx, gen)
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

// plan is what an export writes to the rows collection: the new versions of rows, and the
// current versions they, or deletions, end.
type plan struct {
	inserts []mongo.WriteModel
	ended   []string
}

func (p *plan) empty() bool { return len(p.inserts) == 0 && len(p.ended) == 0 }

// replace writes r's version of generation gen in place of its current versions old, keeping
// the first one's first_seen.
func (p *plan) replace(r *export.Row, old []version, gen int64, now bson.DateTime) error {
	first := now
	if len(old) > 0 && old[0].FirstSeen != 0 {
		first = old[0].FirstSeen
	}
	for _, v := range old {
		p.ended = append(p.ended, v.ID)
	}
	fields, err := rowFields(r)
	if err != nil {
		return err
	}
	doc := append(bson.D{{Key: "_id", Value: versionID(r, gen)}}, fields...)
	doc = append(doc, bson.E{Key: "gen", Value: gen}, bson.E{Key: "first_seen", Value: first}, bson.E{Key: "updated_at", Value: now})
	p.inserts = append(p.inserts, mongo.NewInsertOneModel().SetDocument(doc))
	return nil
}

// rowKey is a row's identity within its cluster and inventory, as currentVersions keys it.
func rowKey(r *export.Row) string { return r.Target + "/" + r.UID }

// diffPlan writes a new version of every added and changed row and ends the current versions
// of those and of deleted rows, whatever they are: the rows outside the diff are the state's
// checksum's. Inserts never look documents up (on FerretDB an update by _id scans the
// collection; an insert does not), and one read finds the versions to end.
func (w *writer) diffPlan(ctx context.Context, b *sink.Batch, gen int64, now bson.DateTime) (*plan, error) {
	upserts := b.Diff.Upserts()
	uids := make([]string, 0, len(upserts)+len(b.Diff.Deleted))
	for _, rows := range [][]export.Row{upserts, b.Diff.Deleted} {
		for i := range rows {
			uids = append(uids, rows[i].UID)
		}
	}
	cur, err := w.currentVersions(ctx, uids)
	if err != nil {
		return nil, err
	}
	p := &plan{}
	for i := range upserts {
		if err := p.replace(&upserts[i], cur[rowKey(&upserts[i])], gen, now); err != nil {
			return nil, err
		}
	}
	for i := range b.Diff.Deleted {
		for _, v := range cur[rowKey(&b.Diff.Deleted[i])] {
			p.ended = append(p.ended, v.ID)
		}
	}
	return p, nil
}

// fullPlan compares the snapshot with the current versions of this cluster and inventory
// (their _id and digest) and writes only what differs: new versions of new and changed rows,
// the end of changed, duplicated and removed ones.
func (w *writer) fullPlan(ctx context.Context, rows []export.Row, gen int64, now bson.DateTime) (*plan, error) {
	cur, err := w.currentVersions(ctx, nil)
	if err != nil {
		return nil, err
	}
	p := &plan{}
	for i := range rows {
		r := &rows[i]
		old := cur[rowKey(r)]
		delete(cur, rowKey(r))
		if len(old) == 1 && old[0].Digest == digest(r) {
			continue
		}
		if err := p.replace(r, old, gen, now); err != nil {
			return nil, err
		}
	}
	stale := make([]string, 0, len(cur))
	for _, vs := range cur {
		for _, v := range vs {
			stale = append(stale, v.ID)
		}
	}
	slices.Sort(stale)
	p.ended = append(p.ended, stale...)
	return p, nil
}
