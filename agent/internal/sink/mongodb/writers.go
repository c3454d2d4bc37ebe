package mongodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// The writer check reads the state document and decides before the first write of an export
// or confirmation. MongoDB sinks run without transactions (FerretDB has none), so two agents
// whose very first exports of an inventory start at the same moment on an empty state both
// proceed; the next export or confirmation of either then finds the other's writer and is
// refused or reports the contention.

// readState reads the state document, nil when there is none.
func (w *writer) readState(ctx context.Context) (*stateDoc, error) {
	var doc stateDoc
	switch err := w.state.FindOne(ctx, bson.D{{Key: "_id", Value: stateID(w.cluster, w.inventory)}}).Decode(&doc); {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading state: %w", err)
	}
	return &doc, nil
}

// check is the writer check of self writing at now over st (nil: no state, nobody to refuse).
func (w *writer) check(st *stateDoc, self export.Writer, now time.Time, window time.Duration) sink.WriterCheck {
	c := sink.WriterCheck{Cluster: w.cluster, Inventory: w.inventory, Self: self, Now: now, Window: window}
	if st == nil {
		return c
	}
	c.Holder = export.Writer{Version: st.AgentVersion, Instance: st.AgentInstance}
	c.HolderLastWrite = st.ExportedAt.Time()
	if confirmed := st.ConfirmedAt.Time(); confirmed.After(c.HolderLastWrite) {
		c.HolderLastWrite = confirmed
	}
	c.Contender = export.Writer{Version: st.ContenderVersion, Instance: st.ContenderInstance}
	if st.ContendedAt != 0 {
		c.ContendedAt = st.ContendedAt.Time()
	}
	return c
}

// takeover logs, and reports, a write over the state of another agent gone for the window.
func (w *writer) takeover(c sink.WriterCheck, st *stateDoc) bool {
	if !c.TakesOver() {
		return false
	}
	w.log.Info("taking over the state of another agent that has not written for the conflict window", "cluster", w.cluster,
		"inventory", w.inventory, "previous", st.AgentInstance, "previousVersion", st.AgentVersion, "lastWrite", c.HolderLastWrite)
	return true
}

// markContender records, and nothing else, that the refused writer tried: the holder's next
// export or confirmation reports it. The checksum, the writer and every row stay.
func (w *writer) markContender(ctx context.Context, who export.Writer, at time.Time) error {
	_, err := w.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: stateID(w.cluster, w.inventory)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "contender_version", Value: who.Version}, {Key: "contender_instance", Value: who.Instance},
			{Key: "contended_at", Value: bson.NewDateTimeFromTime(at)}}}})
	if err != nil {
		return fmt.Errorf("recording the refused writer in the state: %w", err)
	}
	return nil
}
