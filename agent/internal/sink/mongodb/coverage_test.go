package mongodb

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

var services, complete = sinktest.Services, sinktest.Complete

// storedCoverage reads a cluster's coverage documents of inventory apps, by target.
func storedCoverage(tb testing.TB, coll *mongo.Collection, cluster string) map[string]coverageDoc {
	tb.Helper()
	cur, err := coll.Find(context.Background(), bson.D{{Key: "cluster", Value: cluster}, {Key: "inventory", Value: "apps"}})
	if err != nil {
		tb.Fatal(err)
	}
	var docs []coverageDoc
	if err := cur.All(context.Background(), &docs); err != nil {
		tb.Fatal(err)
	}
	out := map[string]coverageDoc{}
	for _, d := range docs {
		out[d.Target] = d
	}
	return out
}

func (d coverageDoc) entry() export.Coverage {
	return export.Coverage{Target: d.Target, State: v1alpha1.CoverageState(d.State), Rows: d.Rows, ExtractionErrors: d.ExtractionErrors, Reason: d.Reason}
}

// rowMarks is every document's updated_at and digest of a cluster: a rewritten row changes
// its updated_at.
func rowMarks(tb testing.TB, coll *mongo.Collection, cluster string) map[string]string {
	tb.Helper()
	cur, err := coll.Find(context.Background(), bson.D{{Key: "cluster", Value: cluster}},
		options.Find().SetProjection(bson.D{{Key: "updated_at", Value: 1}, {Key: "digest", Value: 1}}))
	if err != nil {
		tb.Fatal(err)
	}
	var all []bson.M
	if err := cur.All(context.Background(), &all); err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range all {
		out[fmt.Sprint(d["_id"])] = fmt.Sprint(d["updated_at"], " ", d["digest"])
	}
	return out
}

func readState(tb testing.TB, coll *mongo.Collection, id string) stateDoc {
	tb.Helper()
	var st stateDoc
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&st); err != nil {
		tb.Fatal(err)
	}
	return st
}

// TestCoverageIsWrittenBesideTheRows, against FerretDB (a stand-in for MongoDB): the coverage
// lands in rows_coverage, one document per target; a batch whose only change is the coverage
// rewrites no row document (updated_at and digest unchanged) and only the coverage document
// that changed, and keeps exported_at; the same batch again sends no write; a denied target
// loses its rows and keeps a deniedByScope document; a target leaving the coverage loses its
// document, and another cluster's documents are never touched.
func TestCoverageIsWrittenBesideTheRows(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, rec := newSink(t, db, "east")
	ws, _ := newSink(t, db, "west")
	docs, state, cov := collection(t, db, "rows"), collection(t, db, "rows_state"), collection(t, db, "rows_coverage")
	deps, svcs := sinktest.Deployments("east", "apps", 4, 1), services("east", "apps", 2)
	all := append(append([]export.Row(nil), deps...), svcs...)
	a := &agent{sink: s, cluster: "east", inventory: "apps",
		coverage: []export.Coverage{complete("services", 2), complete("deployments", 4)}} // unsorted: the sink sorts
	if err := a.export(ctx, all); err != nil {
		t.Fatal(err)
	}
	west := &agent{sink: ws, cluster: "west", inventory: "apps", coverage: []export.Coverage{complete("deployments", 3), complete("services", 0)}}
	if err := west.export(ctx, sinktest.Deployments("west", "apps", 3, 1)); err != nil {
		t.Fatal(err)
	}
	westBefore := storedCoverage(t, cov, "west")
	before := storedCoverage(t, cov, "east")
	if len(before) != 2 || before["deployments"].entry() != complete("deployments", 4) || before["services"].ID != "east/apps/services" {
		t.Fatalf("after the first export east's coverage is %+v", before)
	}
	marks := rowMarks(t, docs, "east")
	st := readState(t, state, "east/apps")
	rec.take()

	// Services turn forbidden: their rows are kept, the snapshot's checksum does not change.
	forbidden := export.Coverage{Target: "services", State: "forbidden", Rows: 2, ExtractionErrors: 1,
		Reason: `services is forbidden: User "system:serviceaccount:kollect:agent" cannot list resource "services"`}
	a.coverage = []export.Coverage{complete("deployments", 4), forbidden}
	b := a.batch(all)
	if b.Envelope.Checksum != b.PreviousChecksum || !b.Diff.Empty() {
		t.Fatalf("not a coverage-only batch: %s vs %s", b.Envelope.Checksum, b.PreviousChecksum)
	}
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	a.accept()
	for _, w := range writes(rec.take()) {
		if !strings.HasSuffix(w, " rows_coverage") && !strings.HasSuffix(w, " rows_state") {
			t.Errorf("a coverage-only export wrote %q", w)
		}
	}
	if got := rowMarks(t, docs, "east"); !maps.Equal(got, marks) {
		t.Fatalf("a coverage-only export rewrote rows: %v -> %v", marks, got)
	}
	after := storedCoverage(t, cov, "east")
	if got := after["services"]; got.entry() != forbidden || got.UpdatedAt < before["services"].UpdatedAt {
		t.Fatalf("services coverage %+v, want %+v", got, forbidden)
	}
	if after["deployments"] != before["deployments"] {
		t.Fatalf("the unchanged coverage document was rewritten: %+v -> %+v", before["deployments"], after["deployments"])
	}
	if now := readState(t, state, "east/apps"); now.ExportedAt != st.ExportedAt || now.ConfirmedAt != st.ConfirmedAt || now.Checksum != st.Checksum {
		t.Fatalf("a coverage-only export of an incomplete snapshot changed the state %+v -> %+v", st, now)
	}

	// The same batch again: no write command at all.
	if err := a.export(ctx, all); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec.take()); len(w) != 0 {
		t.Fatalf("an export with the stored checksum and coverage wrote %q", w)
	}
	if again := storedCoverage(t, cov, "east"); !maps.Equal(again, after) {
		t.Fatalf("an unchanged export changed the coverage: %+v -> %+v", after, again)
	}

	// Complete again: coverage only, and the export confirms.
	a.coverage = []export.Coverage{complete("deployments", 4), complete("services", 2)}
	b = a.batch(all)
	b.Envelope.ExportedAt = st.ConfirmedAt.Time().Add(time.Minute)
	if err := s.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	a.accept()
	if now := readState(t, state, "east/apps"); now.ExportedAt != st.ExportedAt || !now.ConfirmedAt.Time().Equal(b.Envelope.ExportedAt.Truncate(time.Millisecond)) {
		t.Fatalf("a coverage-only export of a complete snapshot: state %+v, want exported_at %v and confirmed_at %v", now, st.ExportedAt, b.Envelope.ExportedAt)
	}
	if got := rowMarks(t, docs, "east"); !maps.Equal(got, marks) {
		t.Fatalf("a coverage-only export rewrote rows: %v -> %v", marks, got)
	}

	// A scope denies services: their rows go, their document says why.
	denied := export.Coverage{Target: "services", State: "deniedByScope", Reason: "KollectScope team-a does not permit services"}
	a.coverage = []export.Coverage{complete("deployments", 4), denied}
	if err := a.export(ctx, deps); err != nil {
		t.Fatal(err)
	}
	if n := countDocs(t, docs, bson.D{{Key: "cluster", Value: "east"}, {Key: "target", Value: "services"}}); n != 0 {
		t.Fatalf("%d rows of a denied target remain", n)
	}
	if got := storedCoverage(t, cov, "east")["services"].entry(); got != denied {
		t.Fatalf("denied target's coverage %+v, want %+v", got, denied)
	}

	// Services leave the inventory: their document goes, west's stay as they were.
	a.coverage = []export.Coverage{complete("deployments", 4)}
	if err := a.export(ctx, deps); err != nil {
		t.Fatal(err)
	}
	if got := storedCoverage(t, cov, "east"); len(got) != 1 || got["deployments"].entry() != complete("deployments", 4) {
		t.Fatalf("after services left, east's coverage is %+v", got)
	}
	if westAfter := storedCoverage(t, cov, "west"); !maps.Equal(westAfter, westBefore) {
		t.Fatalf("east's exports touched west's coverage: %+v -> %+v", westBefore, westAfter)
	}

	// A confirmation keeps the coverage.
	kept := storedCoverage(t, cov, "east")
	if err := s.Confirm(ctx, sink.Confirmation{Cluster: "east", Inventory: "apps", Checksum: a.lastChecksum, At: time.Now().UTC(),
		Coverage: a.coverage}); err != nil {
		t.Fatal(err)
	}
	if got := storedCoverage(t, cov, "east"); !maps.Equal(got, kept) {
		t.Fatalf("a confirmation changed the coverage: %+v -> %+v", kept, got)
	}
}
