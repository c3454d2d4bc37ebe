package mongodb

import (
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// fleetVersions are the snapshots every cluster of the fleet test exports, in order: an initial
// load, a diff of changes, deletions and additions, a diff of changes, a full reconcile (the
// agent forgot what the sink holds) of changes and a deletion, and the same snapshot again.
func fleetVersions(cluster string) [][]export.Row {
	v1 := sinktest.Deployments(cluster, "apps", 20, 1)
	v2 := append([]export.Row(nil), v1[:18]...)
	for i := range 5 {
		v2[i] = sinktest.Deployment(cluster, "apps", i, map[string]any{"replicas": 2, "step": 2})
	}
	for i := 20; i < 23; i++ {
		v2 = append(v2, sinktest.Deployment(cluster, "apps", i, map[string]any{"new": i}))
	}
	v3 := append([]export.Row(nil), v2...)
	for i := 5; i < 15; i++ {
		v3[i] = sinktest.Deployment(cluster, "apps", i, map[string]any{"replicas": 3, "step": 3})
	}
	v4 := append([]export.Row(nil), v3[:10]...)
	v4 = append(v4, v3[11:]...)
	for i := range 3 {
		v4[i] = sinktest.Deployment(cluster, "apps", i, map[string]any{"replicas": 4, "step": 4})
	}
	return [][]export.Row{v1, v2, v3, v4, v4}
}

// snapshots maps each checksum a cluster exported to its rows, uid → canonical attributes.
type snapshots struct {
	mu  sync.Mutex
	set map[string]map[string]string
}

func (s *snapshots) add(rows []export.Row) {
	snap := export.NewSnapshot(append([]export.Row(nil), rows...))
	m := map[string]string{}
	for _, r := range snap.Rows {
		m[r.UID] = string(r.Attributes)
	}
	s.mu.Lock()
	s.set[snap.Checksum] = m
	s.mu.Unlock()
}

func (s *snapshots) get(sum string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set[sum]
}

// readComplete is the reader of docs/sinks/mongodb.md ("For a fleet"): the generations of the
// state collection, then the rows those show, then the generations again. It returns each
// inventory's rows (uid → canonical attributes) whose generation did not move meanwhile, with
// the checksum the state names for it, and how many inventories moved.
func readComplete(ctx context.Context, rows, state *mongo.Collection) (map[string]map[string]string, map[string]string, int, error) {
	before, err := Generations(ctx, state, "", "")
	if err != nil {
		return nil, nil, 0, err
	}
	cur, err := rows.Find(ctx, CompleteFilter(before), options.Find().SetProjection(bson.D{{Key: "cluster", Value: 1},
		{Key: "inventory", Value: 1}, {Key: "uid", Value: 1}, {Key: "attributes", Value: 1}}))
	if err != nil {
		return nil, nil, 0, err
	}
	var docs []struct {
		Cluster    string `bson:"cluster"`
		Inventory  string `bson:"inventory"`
		UID        string `bson:"uid"`
		Attributes bson.D `bson:"attributes"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, nil, 0, err
	}
	after, err := Generations(ctx, state, "", "")
	if err != nil {
		return nil, nil, 0, err
	}
	still := map[string]int64{}
	for _, g := range after {
		still[g.Cluster+"/"+g.Inventory] = g.Generation
	}
	seen, sums, moved := map[string]map[string]string{}, map[string]string{}, 0
	for _, g := range before {
		k := g.Cluster + "/" + g.Inventory
		if gen, ok := still[k]; !ok || gen != g.Generation {
			moved++
			continue
		}
		seen[k], sums[k] = map[string]string{}, g.Checksum
	}
	for _, d := range docs {
		inv := seen[d.Cluster+"/"+d.Inventory]
		if inv == nil {
			continue
		}
		if _, dup := inv[d.UID]; dup {
			return nil, nil, 0, fmt.Errorf("%s/%s shows row %s twice", d.Cluster, d.Inventory, d.UID)
		}
		attrs, err := fromBSON(d.Attributes)
		if err != nil {
			return nil, nil, 0, err
		}
		inv[d.UID] = string(attrs)
	}
	return seen, sums, moved, nil
}

// TestFleetOfTwentyWritersNeverShowsHalfAnExport: 20 sinks with 20 cluster names export into
// one collection of FerretDB (a stand-in for MongoDB, without transactions) at once, five
// exports each (initial load, two diffs, a full reconcile, an unchanged one), while a reader
// polls with the documented query. Every observation of an inventory must be exactly one
// snapshot its cluster exported, the one the state's checksum names; afterwards every
// cluster holds exactly its last snapshot and no ended version is left. One export is held
// at its switch while the reader looks, so that at least one observation falls inside an
// export for certain: it shows the previous snapshot whole although the collection holds the
// new versions.
func TestFleetOfTwentyWritersNeverShowsHalfAnExport(t *testing.T) {
	const clusters = 20
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	db := newDatabase(t)
	rows, state := collection(t, db, "rows"), collection(t, db, "rows_state")
	exported := &snapshots{set: map[string]map[string]string{}}
	agents := make([]*agent, clusters)
	// c00's sink stops at the switch of its second export (generation 2) while the test reads.
	paused, resume := make(chan struct{}), make(chan struct{})
	for i := range agents {
		name := fmt.Sprintf("c%02d", i)
		var s *Sink
		if i == 0 {
			var err error
			if s, err = open(ctx, spec(db), testEnv(name), withMonitor(holdSwitch(2, paused, resume))); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
		} else {
			s, _ = newSink(t, db, name)
		}
		agents[i] = &agent{sink: s, cluster: name, inventory: "apps"}
		for _, v := range fleetVersions(name) {
			exported.add(v)
		}
	}

	var done atomic.Bool
	var observations, moved, retries atomic.Int64
	readerErr := make(chan error, 1)
	go func() {
		readerErr <- pollReader(ctx, rows, state, exported, &done, &observations, &moved)
	}()
	var wg sync.WaitGroup
	errs := make(chan error, clusters)
	for _, a := range agents {
		wg.Go(func() {
			for n, v := range fleetVersions(a.cluster) {
				if n == 3 {
					a.lastChecksum, a.prev = "", nil // the agent restarted: a full reconcile
				}
				if err := exportRetrying(ctx, a, v, &retries); err != nil {
					errs <- fmt.Errorf("%s: export %d: %w", a.cluster, n+1, err)
					return
				}
			}
		})
	}
	// Inside c00's second export, at its switch: the reader's query shows the first whole.
	select {
	case <-paused:
	case <-ctx.Done():
		t.Fatal("c00's second export never reached its switch")
	}
	checkInsideExport(t, ctx, rows, state, exported, fleetVersions("c00"))
	close(resume)
	wg.Wait()
	done.Store(true)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := <-readerErr; err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	checkFleetConverged(t, rows, agents, exported)
	t.Logf("%d clusters × 5 exports (%d retried after a transient error); the polling reader checked %d inventory "+
		"observations against the snapshots (%d more were read again because their generation moved)",
		clusters, retries.Load(), observations.Load(), moved.Load())
	if observations.Load() == 0 {
		t.Fatal("the reader checked nothing")
	}
}

// exportRetrying exports rows as the delivery worker does: a transient error is retried after
// a short, growing pause. FerretDB on SQLite answers some concurrent writes with "database is
// locked" (SQLITE_BUSY); the retry then starts by rolling the interrupted export back.
func exportRetrying(ctx context.Context, a *agent, rows []export.Row, retries *atomic.Int64) error {
	for attempt := 1; ; attempt++ {
		err := a.export(ctx, rows)
		if err == nil || sink.ClassOf(err) != sink.Transient || attempt == 20 {
			return err
		}
		retries.Add(1)
		pause := time.NewTimer(time.Duration(attempt) * 20 * time.Millisecond)
		select {
		case <-pause.C:
		case <-ctx.Done():
			pause.Stop()
			return err
		}
	}
}

// holdSwitch is a command monitor that stops the sink at the switch to generation gen (the
// state update that sets it) until resume is closed, after closing paused.
func holdSwitch(gen int64, paused, resume chan struct{}) *event.CommandMonitor {
	var once sync.Once
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if coll, _ := e.Command.Lookup("update").StringValueOK(); e.CommandName != "update" || coll != "rows_state" {
			return
		}
		updates, ok := e.Command.Lookup("updates").ArrayOK()
		if !ok {
			return
		}
		values, err := updates.Values()
		if err != nil || len(values) == 0 {
			return
		}
		doc, ok := values[0].DocumentOK()
		if !ok {
			return
		}
		if g, ok := doc.Lookup("u", "$set", "generation").AsInt64OK(); ok && g == gen {
			once.Do(func() {
				close(paused)
				<-resume
			})
		}
	}}
}

// pollReader reads the fleet with the documented query until done, and checks every
// inventory it saw whole against the snapshot the state's checksum names.
func pollReader(ctx context.Context, rows, state *mongo.Collection, exported *snapshots, done *atomic.Bool, observations, moved *atomic.Int64) error {
	for !done.Load() {
		seen, sums, m, err := readComplete(ctx, rows, state)
		if err != nil {
			return fmt.Errorf("reader: %w", err)
		}
		moved.Add(int64(m))
		for k, got := range seen {
			want := exported.get(sums[k])
			if want == nil && len(got) == 0 {
				continue // a first export's pending state: generation 0 shows nothing
			}
			if !maps.Equal(got, want) {
				return fmt.Errorf("reader saw %s at checksum %s as %d rows, not the %d rows exported with it: a half-applied export",
					k, export.ShortChecksum(sums[k]), len(got), len(want))
			}
			observations.Add(1)
		}
	}
	return nil
}

// checkInsideExport reads while c00's second export holds at its switch: the documented query
// shows the first snapshot whole, while the collection already holds the second's versions.
func checkInsideExport(t *testing.T, ctx context.Context, rows, state *mongo.Collection, exported *snapshots, versions [][]export.Row) {
	t.Helper()
	seen, sums, _, err := readComplete(ctx, rows, state)
	if err != nil {
		t.Fatal(err)
	}
	first := export.NewSnapshot(append([]export.Row(nil), versions[0]...)).Checksum
	if sums["c00/apps"] != first || !maps.Equal(seen["c00/apps"], exported.get(first)) {
		t.Fatalf("inside the second export the reader saw c00 at %s as %d rows, want the first export's %d rows",
			export.ShortChecksum(sums["c00/apps"]), len(seen["c00/apps"]), len(exported.get(first)))
	}
	raw := countDocs(t, rows, bson.D{{Key: "cluster", Value: "c00"}})
	ended := countDocs(t, rows, bson.D{{Key: "cluster", Value: "c00"}, {Key: "gen_end", Value: bson.D{{Key: "$exists", Value: true}}}})
	// 5 changed rows and 3 added are new versions; 5 changed and 2 deleted are ended.
	if raw != 20+8 || ended != 7 {
		t.Fatalf("inside the second export c00 has %d documents, %d ended; want 28 and 7", raw, ended)
	}
}

// checkFleetConverged checks that every cluster holds exactly its last snapshot, its state
// its checksum, and that no ended version or pending mark is left.
func checkFleetConverged(t *testing.T, rows *mongo.Collection, agents []*agent, exported *snapshots) {
	t.Helper()
	for _, a := range agents {
		if got, want := stored(t, rows, a.cluster), exported.get(a.lastChecksum); !maps.Equal(got, want) {
			t.Errorf("%s holds %d rows, want its last snapshot's %d", a.cluster, len(got), len(want))
		}
	}
	if n := countDocs(t, rows, bson.D{{Key: "gen_end", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 0 {
		t.Errorf("%d ended versions left", n)
	}
	last := len(fleetVersions("c00")[4])
	if n := countDocs(t, rows, bson.D{}); n != int64(len(agents)*last) {
		t.Errorf("%d documents, want %d", n, len(agents)*last)
	}
	state := rows.Database().Collection("rows_state")
	if n := countDocs(t, state, bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "pending", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "dirty", Value: bson.D{{Key: "$exists", Value: true}}}}}}}); n != 0 {
		t.Errorf("%d states left pending or dirty", n)
	}
}

// TestDocumentedReaderQuery checks that the reader's filter in docs/sinks/mongodb.md is the one
// Query and CompleteFilter build: the page's per-inventory clause, with a state's values put
// in, equals visibleAt's.
func TestDocumentedReaderQuery(t *testing.T) {
	raw, err := os.ReadFile("../../../../docs/sinks/mongodb.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## For a fleet\n")
	if !ok {
		t.Fatal("docs/sinks/mongodb.md has no section For a fleet")
	}
	m := regexp.MustCompile(`const complete = gens\.map\(s => \((\{.*\})\)\)`).FindStringSubmatch(section)
	if m == nil {
		t.Fatal("the section has no per-inventory clause (const complete = gens.map(s => ({…})))")
	}
	clause := strings.NewReplacer(`s.cluster`, `"east"`, `s.inventory`, `"apps"`, `s.generation ?? 0`, `7`).Replace(m[1])
	clause = regexp.MustCompile(`([{,]\s*)(\$?\w+):`).ReplaceAllString(clause, `$1"$2":`)
	var doc bson.D
	if err := bson.UnmarshalExtJSON([]byte(clause), false, &doc); err != nil {
		t.Fatalf("the page's clause %s: %v", clause, err)
	}
	got, err := bson.MarshalExtJSON(doc, false, false)
	if err != nil {
		t.Fatal(err)
	}
	want, err := bson.MarshalExtJSON(visibleAt("east", "apps", 7), false, false)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("the page's clause is\n%s\nthe sink's\n%s", got, want)
	}
	for _, step := range []string{"db.rows_state.find({}, {_id: 0, cluster: 1, inventory: 1, generation: 1})", "db.rows.find({$or: complete"} {
		if !strings.Contains(section, step) {
			t.Errorf("the reader's query lacks %s", step)
		}
	}
}
