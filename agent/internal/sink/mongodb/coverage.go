package mongodb

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"kollect.dev/agent/internal/export"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// coverageDoc is one target's coverage document in <collection>_coverage.
type coverageDoc struct {
	ID               string        `bson:"_id"`
	Cluster          string        `bson:"cluster"`
	Inventory        string        `bson:"inventory"`
	Target           string        `bson:"target"`
	State            string        `bson:"state"`
	Rows             int64         `bson:"rows"`
	ExtractionErrors int64         `bson:"extraction_errors"`
	Reason           string        `bson:"reason"`
	UpdatedAt        bson.DateTime `bson:"updated_at"`
}

// coverageID is a coverage document's _id, cluster/inventory/target: one document per target,
// addressed by primary key like the rows.
func coverageID(cluster, inventory, target string) string {
	return cluster + "/" + inventory + "/" + target
}

// batchCoverage is the envelope's coverage as the sink stores it: sorted by target, reasons
// bounded and valid UTF-8 (BSON strings must be), one entry per target. It works on a copy:
// every sink of the inventory shares the envelope's slice.
func batchCoverage(env *export.Envelope) []export.Coverage {
	c := export.NormalizeCoverage(slices.Clone(env.Coverage))
	for i := range c {
		c[i].Reason = strings.ToValidUTF8(c[i].Reason, "\uFFFD")
	}
	// One document per target, the first entry's: a duplicate can only be a bug upstream.
	return slices.CompactFunc(c, func(a, b export.Coverage) bool { return a.Target == b.Target })
}

// readCoverage reads this cluster's and inventory's coverage documents, sorted by target.
func (w *writer) readCoverage(ctx context.Context) ([]export.Coverage, error) {
	cur, err := w.coverage.Find(ctx, bson.D{{Key: "cluster", Value: w.cluster}, {Key: "inventory", Value: w.inventory}})
	if err != nil {
		return nil, fmt.Errorf("reading coverage: %w", err)
	}
	var docs []coverageDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("reading coverage: %w", err)
	}
	out := make([]export.Coverage, len(docs))
	for i, d := range docs {
		out[i] = export.Coverage{Target: d.Target, State: v1alpha1.CoverageState(d.State), Rows: d.Rows,
			ExtractionErrors: d.ExtractionErrors, Reason: d.Reason}
	}
	slices.SortFunc(out, func(a, b export.Coverage) int { return strings.Compare(a.Target, b.Target) })
	return out, nil
}

// saveCoverage makes the coverage collection hold exactly cov for this cluster and inventory:
// it replaces only the documents that differ from stored (so only they get a new updated_at)
// and deletes those of targets no longer covered, naming the cluster and inventory in the
// delete as every row delete does.
func (w *writer) saveCoverage(ctx context.Context, stored, cov []export.Coverage, now bson.DateTime) error {
	old := make(map[string]export.Coverage, len(stored))
	for _, c := range stored {
		old[c.Target] = c
	}
	var models []mongo.WriteModel
	for _, c := range cov {
		if o, ok := old[c.Target]; ok && o == c {
			delete(old, c.Target)
			continue
		}
		delete(old, c.Target)
		id := coverageID(w.cluster, w.inventory, c.Target)
		models = append(models, mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}).SetUpsert(true).
			SetReplacement(coverageDoc{ID: id, Cluster: w.cluster, Inventory: w.inventory, Target: c.Target, State: string(c.State),
				Rows: c.Rows, ExtractionErrors: c.ExtractionErrors, Reason: c.Reason, UpdatedAt: now}))
	}
	if len(old) > 0 {
		gone := bson.A{}
		for target := range old {
			gone = append(gone, coverageID(w.cluster, w.inventory, target))
		}
		models = append(models, mongo.NewDeleteManyModel().SetFilter(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: gone}}},
			{Key: "cluster", Value: w.cluster}, {Key: "inventory", Value: w.inventory}}))
	}
	if err := w.bulkInto(ctx, w.coverage, models); err != nil {
		return fmt.Errorf("saving coverage: %w", err)
	}
	return nil
}

// touchState records, for an export whose rows the state already holds but whose coverage
// changed, the writer and, when every target is complete, the confirmation the export is (as
// the delivery worker counts it); checksum, item_count and exported_at, the rows' last
// change, stay.
func (w *writer) touchState(ctx context.Context, env *export.Envelope, complete bool) error {
	set := bson.D{{Key: "agent_version", Value: env.Writer.Version}, {Key: "agent_instance", Value: env.Writer.Instance}}
	if complete {
		at := env.ExportedAt
		if at.IsZero() {
			at = time.Now()
		}
		set = append(set, bson.E{Key: "confirmed_at", Value: bson.NewDateTimeFromTime(at)})
	}
	if _, err := w.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: stateID(w.cluster, w.inventory)}},
		bson.D{{Key: "$set", Value: set}}); err != nil {
		return fmt.Errorf("saving state: %w", err)
	}
	return nil
}
