package bigquery

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	bqv2 "google.golang.org/api/bigquery/v2"
)

// FakeBigQuery is a FAKE of the BigQuery REST API (v2), not an emulator: an httptest server
// that implements the documented resources the sink uses (datasets.get/insert,
// tables.get/insert/delete, tabledata.insertAll, jobs.query) with in-memory tables.
//
// Why a fake: the only emulator (goccy/bigquery-emulator) takes about 20 minutes of both
// cores and 6.8 GB of RAM to build here (recipes/sink-servers.md), which this project's
// shared machines cannot spare; BigQuery itself cannot be reached from here.
//
// What it proves and what it does not: the sink's REST traffic (paths, bodies, query
// parameters, errors, status codes) goes through the real Go client against the documented
// wire format, and the sink's decisions (nothing / diff / full reconcile, staging, cluster
// bounds, retries) are exercised. It has no SQL engine: it recognises the two queries the
// sink sends (the state read and the MERGE transaction) by their shape and applies their
// documented semantics itself, so the SQL text is checked only for that shape. Any other
// query is refused with 400, which fails the test.
type FakeBigQuery struct {
	*httptest.Server

	mu       sync.Mutex
	datasets map[string]*bqv2.Dataset       // project.dataset
	tables   map[string]*fakeTable          // project.dataset.table
	calls    map[string]int                 // "METHOD resource" → count
	results  map[string]*bqv2.QueryResponse // job id → results, for jobs.getQueryResults
	failNext map[string]int                 // call kind → failures left
	failWith map[string]*bqv2.ErrorProto    // call kind → error to fail with
	// RejectAuth answers every request with 401, as for revoked credentials.
	RejectAuth bool
}

type fakeTable struct {
	meta *bqv2.Table
	rows []map[string]any
}

// NewFakeBigQuery starts a fake.
func NewFakeBigQuery() *FakeBigQuery {
	f := &FakeBigQuery{datasets: map[string]*bqv2.Dataset{}, tables: map[string]*fakeTable{},
		calls: map[string]int{}, results: map[string]*bqv2.QueryResponse{}, failNext: map[string]int{}, failWith: map[string]*bqv2.ErrorProto{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// Fail makes the next n calls of kind ("insertAll", "merge", "stateQuery", "createTable")
// fail with the given HTTP status and reason.
func (f *FakeBigQuery) Fail(kind string, n, status int, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext[kind] = n
	f.failWith[kind] = &bqv2.ErrorProto{Reason: reason, Message: fmt.Sprintf("injected %d %s", status, reason), Location: strconv.Itoa(status)}
}

// Calls returns and resets the call counts.
func (f *FakeBigQuery) Calls() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = map[string]int{}
	return out
}

// Rows returns a copy of a table's rows.
func (f *FakeBigQuery) Rows(table string) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tables[table]
	if t == nil {
		return nil
	}
	out := make([]map[string]any, len(t.rows))
	for i, r := range t.rows {
		c := map[string]any{}
		for k, v := range r {
			c[k] = v
		}
		out[i] = c
	}
	return out
}

// Tables lists the table names.
func (f *FakeBigQuery) Tables() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.tables {
		out = append(out, k)
	}
	return out
}

var (
	reDataset  = regexp.MustCompile(`^/projects/([^/]+)/datasets/([^/]+)$`)
	reDatasets = regexp.MustCompile(`^/projects/([^/]+)/datasets$`)
	reTable    = regexp.MustCompile(`^/projects/([^/]+)/datasets/([^/]+)/tables/([^/]+)$`)
	reTables   = regexp.MustCompile(`^/projects/([^/]+)/datasets/([^/]+)/tables$`)
	reInsert   = regexp.MustCompile(`^/projects/([^/]+)/datasets/([^/]+)/tables/([^/]+)/insertAll$`)
	reQueries  = regexp.MustCompile(`^/projects/([^/]+)/queries$`)
	reResults  = regexp.MustCompile(`^/projects/([^/]+)/queries/([^/]+)$`)
)

func (f *FakeBigQuery) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.RejectAuth {
		writeErr(w, http.StatusUnauthorized, "unauthorized", "Request had invalid authentication credentials.")
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/bigquery/v2")
	var m []string
	match := func(re *regexp.Regexp, method string) bool {
		if r.Method != method {
			return false
		}
		m = re.FindStringSubmatch(path)
		return m != nil
	}
	switch {
	case match(reDataset, http.MethodGet):
		f.calls["GET dataset"]++
		ds := f.datasets[m[1]+"."+m[2]]
		if ds == nil {
			writeErr(w, http.StatusNotFound, "notFound", "Not found: Dataset "+m[1]+":"+m[2])
			return
		}
		writeJSON(w, ds)
	case match(reDatasets, http.MethodPost):
		f.calls["POST dataset"]++
		var ds bqv2.Dataset
		if !readJSON(w, r, &ds) {
			return
		}
		key := m[1] + "." + ds.DatasetReference.DatasetId
		if f.datasets[key] != nil {
			writeErr(w, http.StatusConflict, "duplicate", "Already Exists: Dataset "+key)
			return
		}
		f.datasets[key] = &ds
		writeJSON(w, &ds)
	case match(reTable, http.MethodGet):
		f.calls["GET table"]++
		t := f.tables[m[1]+"."+m[2]+"."+m[3]]
		if t == nil {
			writeErr(w, http.StatusNotFound, "notFound", "Not found: Table "+m[1]+":"+m[2]+"."+m[3])
			return
		}
		writeJSON(w, t.meta)
	case match(reTables, http.MethodPost):
		f.calls["POST table"]++
		if f.injected(w, "createTable") {
			return
		}
		var t bqv2.Table
		if !readJSON(w, r, &t) {
			return
		}
		if f.datasets[m[1]+"."+m[2]] == nil {
			writeErr(w, http.StatusNotFound, "notFound", "Not found: Dataset "+m[1]+":"+m[2])
			return
		}
		key := m[1] + "." + m[2] + "." + t.TableReference.TableId
		if f.tables[key] != nil {
			writeErr(w, http.StatusConflict, "duplicate", "Already Exists: Table "+key)
			return
		}
		t.Type = "TABLE"
		f.tables[key] = &fakeTable{meta: &t}
		writeJSON(w, &t)
	case match(reTable, http.MethodDelete):
		f.calls["DELETE table"]++
		key := m[1] + "." + m[2] + "." + m[3]
		if f.tables[key] == nil {
			writeErr(w, http.StatusNotFound, "notFound", "Not found: Table "+key)
			return
		}
		delete(f.tables, key)
		w.WriteHeader(http.StatusNoContent)
	case match(reInsert, http.MethodPost):
		f.calls["POST insertAll"]++
		if f.injected(w, "insertAll") {
			return
		}
		f.insertAll(w, r, m[1]+"."+m[2]+"."+m[3])
	case match(reQueries, http.MethodPost):
		f.calls["POST query"]++
		f.query(w, r, m[1])
	case match(reResults, http.MethodGet):
		// jobs.getQueryResults: the client pages through results it did not get inline.
		res := f.results[m[2]]
		if res == nil {
			writeErr(w, http.StatusNotFound, "notFound", "Not found: Job "+m[2])
			return
		}
		writeJSON(w, &bqv2.GetQueryResultsResponse{Kind: "bigquery#getQueryResultsResponse", JobComplete: true,
			JobReference: res.JobReference, Schema: res.Schema, Rows: res.Rows, TotalRows: res.TotalRows})
	default:
		writeErr(w, http.StatusNotImplemented, "notImplemented", "FakeBigQuery does not implement "+r.Method+" "+r.URL.Path)
	}
}

// injected fails the call when a failure of kind is pending.
func (f *FakeBigQuery) injected(w http.ResponseWriter, kind string) bool {
	if f.failNext[kind] <= 0 {
		return false
	}
	f.failNext[kind]--
	e := f.failWith[kind]
	status, _ := strconv.Atoi(e.Location)
	writeErr(w, status, e.Reason, e.Message)
	return true
}

func (f *FakeBigQuery) insertAll(w http.ResponseWriter, r *http.Request, key string) {
	t := f.tables[key]
	if t == nil {
		writeErr(w, http.StatusNotFound, "notFound", "Not found: Table "+key)
		return
	}
	var req bqv2.TableDataInsertAllRequest
	if !readJSON(w, r, &req) {
		return
	}
	resp := &bqv2.TableDataInsertAllResponse{Kind: "bigquery#tableDataInsertAllResponse"}
	var accepted []map[string]any
	for i, row := range req.Rows {
		rec := map[string]any{}
		var bad string
		for _, field := range t.meta.Schema.Fields {
			v, ok := row.Json[field.Name]
			if !ok || v == nil {
				if field.Mode == "REQUIRED" {
					bad = "missing required field " + field.Name
				}
				continue
			}
			if field.Type == "JSON" {
				s, _ := v.(string)
				if !json.Valid([]byte(s)) {
					bad = "invalid JSON in " + field.Name
				}
			}
			rec[field.Name] = v
		}
		if bad != "" {
			resp.InsertErrors = append(resp.InsertErrors, &bqv2.TableDataInsertAllResponseInsertErrors{
				Index: int64(i), Errors: []*bqv2.ErrorProto{{Reason: "invalid", Message: bad}}})
			continue
		}
		accepted = append(accepted, rec)
	}
	// insertAll is all-or-nothing per request when a row is invalid (no skipInvalidRows).
	if len(resp.InsertErrors) == 0 {
		t.rows = append(t.rows, accepted...)
	}
	writeJSON(w, resp)
}

var (
	reStateQuery = regexp.MustCompile("^SELECT checksum, item_count FROM `([^`]+)` WHERE cluster = @cluster AND inventory = @inventory$")
	reMerge      = regexp.MustCompile("(?s)^BEGIN TRANSACTION;\nMERGE `([^`]+)` T\nUSING `([^`]+)` S\n.*;\nMERGE `([^`]+)` T\n.*COMMIT TRANSACTION;$")
)

func (f *FakeBigQuery) query(w http.ResponseWriter, r *http.Request, project string) {
	var req bqv2.QueryRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.UseLegacySql == nil || *req.UseLegacySql {
		writeErr(w, http.StatusBadRequest, "invalidQuery", "FakeBigQuery: only standard SQL")
		return
	}
	params := map[string]string{}
	for _, p := range req.QueryParameters {
		params[p.Name] = p.ParameterValue.Value
	}
	resp := &bqv2.QueryResponse{Kind: "bigquery#queryResponse", JobComplete: true,
		JobReference: &bqv2.JobReference{ProjectId: project, JobId: fmt.Sprintf("job_%d", time.Now().UnixNano()), Location: req.Location}}
	switch {
	case reStateQuery.MatchString(req.Query):
		f.calls["query state"]++
		if f.injected(w, "stateQuery") {
			return
		}
		t := f.tables[reStateQuery.FindStringSubmatch(req.Query)[1]]
		if t == nil {
			writeErr(w, http.StatusNotFound, "notFound", "Not found: Table")
			return
		}
		resp.Schema = &bqv2.TableSchema{Fields: []*bqv2.TableFieldSchema{{Name: "checksum", Type: "STRING"}, {Name: "item_count", Type: "INTEGER"}}}
		for _, row := range t.rows {
			if row["cluster"] == params["cluster"] && row["inventory"] == params["inventory"] {
				resp.Rows = append(resp.Rows, &bqv2.TableRow{F: []*bqv2.TableCell{{V: row["checksum"]}, {V: fmt.Sprint(row["item_count"])}}})
			}
		}
		resp.TotalRows = uint64(len(resp.Rows))
	case reMerge.MatchString(req.Query):
		f.calls["query merge"]++
		if f.injected(w, "merge") {
			return
		}
		sm := reMerge.FindStringSubmatch(req.Query)
		target, stage, state := f.tables[sm[1]], f.tables[sm[2]], f.tables[sm[3]]
		if target == nil || stage == nil || state == nil {
			writeErr(w, http.StatusNotFound, "notFound", "Not found: Table in MERGE")
			return
		}
		full := strings.Contains(req.Query, "WHEN NOT MATCHED BY SOURCE AND T.cluster = @cluster AND T.inventory = @inventory THEN DELETE")
		merge(target, stage, params["cluster"], params["inventory"], full)
		upsertState(state, params)
		resp.Schema = &bqv2.TableSchema{Fields: []*bqv2.TableFieldSchema{}}
	default:
		writeErr(w, http.StatusBadRequest, "invalidQuery", "FakeBigQuery does not understand this query: "+req.Query)
		return
	}
	f.results[resp.JobReference.JobId] = resp
	writeJSON(w, resp)
}

// merge applies the rows MERGE's documented semantics: staged deletes remove matching keys of
// the cluster and inventory, staged upserts insert new keys and update rows whose content
// differs, and a full merge deletes the cluster's and inventory's rows not staged.
func merge(target, stage *fakeTable, cluster, inventory string, full bool) {
	now := time.Now().UTC().Format("2006-01-02 15:04:05.999999 UTC")
	key := func(row map[string]any) string { return fmt.Sprint(row["target"], "\x00", row["uid"]) }
	staged := map[string]map[string]any{}
	for _, s := range stage.rows {
		staged[key(s)] = s
	}
	var kept []map[string]any
	seen := map[string]bool{}
	for _, t := range target.rows {
		if t["cluster"] != cluster || t["inventory"] != inventory {
			kept = append(kept, t)
			continue
		}
		s, ok := staged[key(t)]
		switch {
		case ok && s["op"] == "delete":
			continue
		case ok && s["op"] == "upsert":
			seen[key(t)] = true
			changed := false
			for _, c := range []string{"api_group", "version", "kind", "namespace", "name"} {
				changed = changed || t[c] != s[c]
			}
			changed = changed || !jsonEqual(t["attributes"], s["attributes"])
			if changed {
				for _, c := range []string{"api_group", "version", "kind", "namespace", "name", "attributes"} {
					t[c] = s[c]
				}
				t["updated_at"] = now
			}
		case !ok && full:
			continue
		}
		kept = append(kept, t)
	}
	for _, s := range stage.rows {
		if s["op"] != "upsert" || seen[key(s)] {
			continue
		}
		seen[key(s)] = true
		row := map[string]any{"cluster": cluster, "inventory": inventory, "first_seen": now, "updated_at": now}
		for _, c := range []string{"target", "api_group", "version", "kind", "namespace", "name", "uid", "attributes"} {
			row[c] = s[c]
		}
		kept = append(kept, row)
	}
	target.rows = kept
}

func upsertState(state *fakeTable, p map[string]string) {
	for _, row := range state.rows {
		if row["cluster"] == p["cluster"] && row["inventory"] == p["inventory"] {
			row["checksum"], row["item_count"], row["exported_at"] = p["checksum"], p["item_count"], p["exported_at"]
			return
		}
	}
	state.rows = append(state.rows, map[string]any{"cluster": p["cluster"], "inventory": p["inventory"],
		"checksum": p["checksum"], "item_count": p["item_count"], "exported_at": p["exported_at"]})
}

// jsonEqual compares two JSON documents as values, as TO_JSON_STRING of JSON columns does.
func jsonEqual(a, b any) bool {
	var va, vb any
	sa, _ := a.(string)
	sb, _ := b.(string)
	if json.Unmarshal([]byte(sa), &va) != nil || json.Unmarshal([]byte(sb), &vb) != nil {
		return sa == sb
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return string(ja) == string(jb)
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeErr(w, http.StatusBadRequest, "invalid", "FakeBigQuery: bad request body: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// writeErr writes the documented error body, which googleapi.CheckResponse parses.
func writeErr(w http.ResponseWriter, status int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": status, "message": msg, "errors": []map[string]any{{"reason": reason, "message": msg, "domain": "global"}},
	}})
}
