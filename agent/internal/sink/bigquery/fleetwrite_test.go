package bigquery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// serviceStandIn sits between a fleet of sinks and the BigQuery emulator and plays the part of
// the service the emulator does not: one mutating job (transaction or DML statement) at a
// time on the dataset's tables. A mutating job that arrives while another runs is answered
// with the service's documented error for it: "Transaction is aborted due to concurrent
// update" for a transaction, which the service cancels, and "Could not serialize access to
// table" for a plain DML statement (the service would queue it first; failing at once is the
// stricter stand-in). It is stricter than BigQuery in one more way: it excludes per dataset,
// not per table. The first mutating job is held until holdFor other clusters were turned
// away, so the fleet collides for certain rather than by timing.
type serviceStandIn struct {
	base    http.RoundTripper
	dataset string

	mu        sync.Mutex
	running   string          // the cluster whose mutating job runs, "" for none
	turnedOff map[string]bool // clusters whose job was turned away at least once
	holdFor   int
	released  chan struct{} // closed once holdFor clusters were turned away
	// Figures: mutating jobs tried, turned away and run, per cluster too; selfOverlap counts
	// jobs of a cluster arriving while its own ran (a sink must never do that).
	attempts, conflicts, ran int
	perCluster               map[string]int
	selfOverlap              int
}

func newServiceStandIn(dataset string, holdFor int) *serviceStandIn {
	return &serviceStandIn{dataset: dataset, turnedOff: map[string]bool{}, holdFor: holdFor, released: make(chan struct{}),
		perCluster: map[string]int{}}
}

// mutatingJob reads a jobs.query or jobs.insert request: whether its SQL changes data, and
// the cluster named by its @cluster parameter.
func mutatingJob(r *http.Request) (bool, string, error) {
	if r.Method != http.MethodPost || !(reQueries.MatchString(r.URL.Path) || strings.HasSuffix(r.URL.Path, "/jobs")) {
		return false, "", nil
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return false, "", err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	type query struct {
		Query           string
		QueryParameters []struct {
			Name           string
			ParameterValue struct{ Value string }
		}
	}
	var req struct {
		query
		Configuration struct{ Query query }
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return false, "", err
	}
	q := req.query
	if q.Query == "" {
		q = req.Configuration.Query
	}
	sql := strings.ToUpper(strings.TrimSpace(q.Query))
	mutating := false
	for _, verb := range []string{"BEGIN TRANSACTION", "UPDATE", "DELETE", "MERGE", "INSERT"} {
		mutating = mutating || strings.HasPrefix(sql, verb)
	}
	cluster := ""
	for _, p := range q.QueryParameters {
		if p.Name == "cluster" {
			cluster = p.ParameterValue.Value
		}
	}
	return mutating, cluster, nil
}

func (f *serviceStandIn) RoundTrip(r *http.Request) (*http.Response, error) {
	mutating, cluster, err := mutatingJob(r)
	if err != nil || !mutating {
		if err != nil {
			return nil, err
		}
		return f.base.RoundTrip(r)
	}
	f.mu.Lock()
	f.attempts++
	f.perCluster[cluster]++
	if f.running != "" {
		if f.running == cluster {
			f.selfOverlap++
		}
		f.conflicts++
		if !f.turnedOff[cluster] {
			f.turnedOff[cluster] = true
			if len(f.turnedOff) == f.holdFor {
				close(f.released)
			}
		}
		resp := f.conflict(r, cluster, f.attempts)
		f.mu.Unlock()
		return resp, nil
	}
	f.running = cluster
	first := f.ran == 0
	f.ran++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running = ""
		f.mu.Unlock()
	}()
	if first {
		select {
		case <-f.released:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return f.base.RoundTrip(r)
}

// conflict is the service's answer to a job that lost to the running one.
func (f *serviceStandIn) conflict(r *http.Request, cluster string, attempt int) *http.Response {
	if reQueries.MatchString(r.URL.Path) {
		return errorResponse(r, http.StatusBadRequest, "invalidQuery", fmt.Sprintf(
			"Transaction is aborted due to concurrent update against table %s:%s.rows. Transaction ID: %s-%d", server.Project, f.dataset, cluster, attempt))
	}
	return errorResponse(r, http.StatusBadRequest, "invalidQuery", fmt.Sprintf(
		"Could not serialize access to table %s:%s.rows_state due to concurrent update", server.Project, f.dataset))
}

// emulatorBackoff is conflictBackoff scaled to the emulator: its transactions take about a
// tenth of a second where BigQuery's take seconds.
var emulatorBackoff = backoff{base: conflictBackoff.base / 20, max: conflictBackoff.max / 20}

// fleetRows is version v of inventory's n rows in cluster: every row's attributes name its
// cluster, inventory, index and version, so that a row from anywhere else shows.
func fleetRows(cluster, inventory string, n, v int) []export.Row {
	rows := make([]export.Row, n)
	for i := range rows {
		raw, err := export.EncodeAttributes(map[string]any{"image": fmt.Sprintf("%s/%s/%d:v%d", cluster, inventory, i, v)})
		if err != nil {
			panic(err)
		}
		rows[i] = export.Row{Origin: &export.Origin{Cluster: cluster, Inventory: inventory, Target: "deployments", Group: "apps",
			Version: "v1", Kind: "Deployment"}, Namespace: "ns", Name: fmt.Sprintf("app-%03d", i),
			UID: fmt.Sprintf("%s-%s-%03d", cluster, inventory, i), Attributes: raw}
	}
	return rows
}

// fleetChange is the second export of an inventory: rows 0 and 1 changed, the last one gone,
// two new ones.
func fleetChange(cluster, inventory string, n int) []export.Row {
	first, next := fleetRows(cluster, inventory, n, 1), fleetRows(cluster, inventory, n+2, 2)
	out := append([]export.Row{next[0], next[1]}, first[2:n-1]...)
	return append(out, next[n], next[n+1])
}

// TestFleetOfTwentyWritersOnOneTable: 20 sinks, each with its cluster name, export an
// inventory each, and four of them a second one through the same sink (an initial load, then
// changes, additions and a delete, then a confirmation) all at once into one dataset of the BigQuery emulator (a stand-in), through
// serviceStandIn, which enforces BigQuery's one mutating job at a time and answers the others
// with the service's documented conflict errors. Every export must succeed, every cluster's
// rows and state must be exactly its last snapshot, and no cluster ever has two mutating jobs
// running.
func TestFleetOfTwentyWritersOnOneTable(t *testing.T) {
	// Four clusters with two inventories are enough to show a sink never overlaps its own
	// jobs; every inventory more costs the serialised emulator about two seconds.
	const clusters, rowsPer, twoInventories = 20, 6, 4
	inventories := func(i int) []string {
		if i < twoInventories {
			return []string{"apps", "ops"}
		}
		return []string{"apps"}
	}
	exports := clusters + twoInventories
	ds := newDataset(t)
	standIn := newServiceStandIn(ds, clusters-1)
	type member struct {
		sink   *Sink
		agents []*agent
	}
	fleet := make([]member, clusters)
	for i := range fleet {
		name := fmt.Sprintf("c%02d", i)
		s, err := open(context.Background(), spec(ds), sink.Env{Cluster: name, Namespace: "kollect", Name: "bq", Log: logr.Discard()},
			func(base http.RoundTripper) http.RoundTripper { standIn.base = base; return standIn })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		s.turns.backoff = emulatorBackoff
		fleet[i].sink = s
		for _, inv := range inventories(i) {
			fleet[i].agents = append(fleet[i].agents, &agent{sink: s, cluster: name, inventory: inv,
				writer: export.Writer{Version: "v1", Instance: "kollect@" + name}})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	errs := make(chan error, exports)
	var wg sync.WaitGroup
	for _, m := range fleet {
		for _, a := range m.agents {
			wg.Go(func() { errs <- runFleetAgent(ctx, a, rowsPer) })
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	checkFleetRows(t, ds, clusters, inventories, rowsPer)
	states := map[string]string{}
	for _, r := range query(t, "SELECT cluster, inventory, checksum FROM `"+server.Project+"."+ds+".rows_state`") {
		states[r[0].(string)+"/"+r[1].(string)] = r[2].(string)
	}
	for _, m := range fleet {
		for _, a := range m.agents {
			if got := states[a.cluster+"/"+a.inventory]; got != a.lastChecksum {
				t.Errorf("state of %s/%s holds %s, want the last export's %s", a.cluster, a.inventory, got, a.lastChecksum)
			}
		}
	}
	if len(states) != exports {
		t.Errorf("%d state rows, want %d", len(states), exports)
	}
	if got := tables(t, ds); !slices.Equal(got, []string{"rows", "rows_coverage", "rows_covered", "rows_state"}) {
		t.Errorf("tables %v: staging tables left behind", got)
	}
	standIn.mu.Lock()
	defer standIn.mu.Unlock()
	if standIn.selfOverlap != 0 {
		t.Errorf("%d mutating jobs of a cluster arrived while its own ran", standIn.selfOverlap)
	}
	if len(standIn.turnedOff) < clusters-1 {
		t.Errorf("%d clusters lost a conflict, want at least %d", len(standIn.turnedOff), clusters-1)
	}
	most := 0
	for _, n := range standIn.perCluster {
		most = max(most, n)
	}
	var conflicts int64
	for _, m := range fleet {
		conflicts += m.sink.turns.conflicts.Load()
	}
	if conflicts != int64(standIn.conflicts) {
		t.Errorf("the sinks counted %d conflicts, the stand-in answered %d", conflicts, standIn.conflicts)
	}
	t.Logf("%d clusters, %d inventories: %d mutating jobs ran, %d attempts turned away with the service's conflict errors "+
		"(%d of %d clusters lost at least once; at most %d attempts for one cluster's jobs)",
		clusters, exports, standIn.ran, standIn.conflicts, len(standIn.turnedOff), clusters, most)
}

// runFleetAgent exports an inventory twice and confirms it, as the delivery worker would.
func runFleetAgent(ctx context.Context, a *agent, n int) error {
	if err := a.export(ctx, fleetRows(a.cluster, a.inventory, n, 1)); err != nil {
		return fmt.Errorf("%s/%s: first export: %w", a.cluster, a.inventory, err)
	}
	if err := a.export(ctx, fleetChange(a.cluster, a.inventory, n)); err != nil {
		return fmt.Errorf("%s/%s: second export: %w", a.cluster, a.inventory, err)
	}
	err := a.sink.Confirm(ctx, sink.Confirmation{Cluster: a.cluster, Inventory: a.inventory, Checksum: a.lastChecksum,
		At: time.Now(), Writer: a.writer})
	if err != nil {
		return fmt.Errorf("%s/%s: confirmation: %w", a.cluster, a.inventory, err)
	}
	return nil
}

// checkFleetRows reads the whole rows table back and compares each cluster's rows, by
// inventory, uid and attributes, with its second export.
func checkFleetRows(t *testing.T, ds string, clusters int, inventories func(int) []string, n int) {
	t.Helper()
	got := map[string][]string{}
	for _, r := range rowsOf(t, ds, "") {
		got[r.Cluster] = append(got[r.Cluster], r.Inventory+" "+r.UID+" "+canonicalJSON(t, r.Attributes))
	}
	for i := range clusters {
		cluster := fmt.Sprintf("c%02d", i)
		var want []string
		for _, inv := range inventories(i) {
			for _, r := range fleetChange(cluster, inv, n) {
				want = append(want, inv+" "+r.UID+" "+canonicalJSON(t, string(r.Attributes)))
			}
		}
		slices.Sort(want)
		have := got[cluster]
		slices.Sort(have)
		if !slices.Equal(have, want) {
			t.Errorf("cluster %s holds\n%s\nwant\n%s", cluster, strings.Join(have, "\n"), strings.Join(want, "\n"))
		}
		delete(got, cluster)
	}
	if len(got) != 0 {
		t.Errorf("rows of unknown clusters: %v", got)
	}
}

// canonicalJSON re-encodes a JSON document with sorted keys and no spaces.
func canonicalJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("attributes %q: %v", s, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestDocumentedGroupView runs the view of docs/sinks/bigquery.md that joins two groups of
// clusters, each writing its own table, against the emulator (a stand-in).
func TestDocumentedGroupView(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	_, section, ok := strings.Cut(readDoc(t), "\n## For a fleet\n")
	if !ok {
		t.Fatal("docs/sinks/bigquery.md has no section For a fleet")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := sqlBlocks(section)
	if len(blocks) != 1 || !strings.HasPrefix(blocks[0], "CREATE VIEW") {
		t.Fatalf("the section's SQL is %q, want one CREATE VIEW", blocks)
	}
	for _, g := range []struct{ table, cluster string }{{"rows_eu", "paris"}, {"rows_us", "ohio"}} {
		sp := spec(ds)
		sp.Table = g.table
		s, err := open(ctx, sp, sink.Env{Cluster: g.cluster, Namespace: "kollect", Name: "bq", Log: logr.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		a := &agent{sink: s, cluster: g.cluster, inventory: "apps"}
		if err := a.export(ctx, mkRows(g.cluster, 3, 1)); err != nil {
			t.Fatal(err)
		}
	}
	query(t, strings.ReplaceAll(blocks[0], "acme-fleet.kollect.", server.Project+"."+ds+"."))
	got := query(t, "SELECT cluster, COUNT(*) FROM `"+server.Project+"."+ds+".fleet_rows` GROUP BY cluster ORDER BY cluster")
	if fmt.Sprint(got) != "[[ohio 3] [paris 3]]" {
		t.Fatalf("the view counts %v, want 3 rows of ohio and of paris", got)
	}
}
