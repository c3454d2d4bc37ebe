package sinks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"kollect.dev/testenv"
)

// run runs an independent client and returns its standard output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// contractRow is a row in the export contract's JSON (snapshot documents, change events).
type contractRow struct {
	Cluster, Inventory, Target, Group, Version, Kind, Namespace, Name, UID string
	Profile                                                                string
	ProfileGeneration                                                      int64 `json:"profileGeneration"`
	Attributes                                                             json.RawMessage
}

func (c contractRow) row() (row, error) {
	a, err := canonJSON(c.Attributes)
	return row{Cluster: c.Cluster, Inventory: c.Inventory, Target: c.Target, Group: c.Group, Version: c.Version,
		Kind: c.Kind, Namespace: c.Namespace, Name: c.Name, UID: c.UID, Profile: c.Profile,
		ProfileGeneration: c.ProfileGeneration, Attributes: a}, err
}

// ndjsonRows parses an NDJSON snapshot document into rows.
func ndjsonRows(doc string, into rowSet) error {
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var c contractRow
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return fmt.Errorf("document line %q: %w", sc.Text(), err)
		}
		r, err := c.row()
		if err != nil {
			return err
		}
		if _, dup := into[r.key()]; dup {
			return fmt.Errorf("row %s appears twice", r.key())
		}
		into[r.key()] = r
	}
	return sc.Err()
}

// isDoc says whether a snapshot store's path is one of the inventory's NDJSON documents.
func isDoc(path string) bool { return strings.HasSuffix(path, ".ndjson") }

// --- git (file:// and smart HTTP), gitlab -------------------------------------------------

// gitReader reads a branch with the git CLI: straight from the bare repository, or, with a
// remote, from a local bare copy fetched over smart HTTP first.
type gitReader struct {
	dir, remote, branch string
	api                 *fakeGitLabAPI
	mu                  sync.Mutex
}

func (g *gitReader) sync(ctx context.Context) error {
	if g.remote == "" {
		return nil
	}
	if _, err := os.Stat(g.dir); err != nil {
		if _, err := run(ctx, "git", "init", "-q", "--bare", g.dir); err != nil {
			return err
		}
	}
	_, err := run(ctx, "git", "--git-dir", g.dir, "fetch", "-q", "--prune", g.remote, "+refs/heads/*:refs/heads/*")
	return err
}

// tree lists path -> blob id on the branch.
func (g *gitReader) tree(ctx context.Context) (map[string]string, error) {
	if err := g.sync(ctx); err != nil {
		return nil, err
	}
	out, err := run(ctx, "git", "--git-dir", g.dir, "ls-tree", "-r", "--full-tree", g.branch)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		meta, path, ok := strings.Cut(line, "\t")
		if f := strings.Fields(meta); ok && len(f) == 3 {
			files[path] = f[2]
		}
	}
	return files, nil
}

func (g *gitReader) rows(ctx context.Context) (rowSet, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	files, err := g.tree(ctx)
	if err != nil {
		return nil, err
	}
	got := rowSet{}
	for path, blob := range files {
		if !isDoc(path) {
			continue
		}
		doc, err := run(ctx, "git", "--git-dir", g.dir, "cat-file", "blob", blob)
		if err != nil {
			return nil, err
		}
		if err := ndjsonRows(doc, got); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return got, nil
}

func (g *gitReader) marks(ctx context.Context) (map[string]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	files, err := g.tree(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for path, blob := range files {
		if isDoc(path) {
			m["doc:"+path] = blob
		} else {
			m["meta:"+path] = blob
		}
	}
	count, err := run(ctx, "git", "--git-dir", g.dir, "rev-list", "--count", "--all")
	if err != nil {
		return nil, err
	}
	m["counter:commits"] = strings.TrimSpace(count)
	refs, err := run(ctx, "git", "--git-dir", g.dir, "for-each-ref", "--format=%(refname) %(objectname)")
	if err != nil {
		return nil, err
	}
	m["counter:refs"] = strings.TrimSpace(refs)
	if g.api != nil {
		m["counter:gitlab-api-writes"] = strconv.Itoa(g.api.writeCount())
	}
	return m, nil
}

func decodeJSONObject(r *http.Request) (map[string]any, error) {
	var in map[string]any
	err := json.NewDecoder(r.Body).Decode(&in)
	return in, err
}

func mrJSON(mr map[string]any) string {
	raw, _ := json.Marshal(mr)
	return string(raw)
}

// --- s3: s3cmd -----------------------------------------------------------------------------

type s3cmd struct{ cfg string }

func newS3cmd(dir string, s3 *testenv.S3) (*s3cmd, error) {
	host := strings.TrimPrefix(s3.Endpoint, "http://")
	cfg, err := tempFile(dir, "s3cfg", fmt.Sprintf(`[default]
access_key = %s
secret_key = %s
host_base = %s
host_bucket = %s
use_https = False
bucket_location = %s
signature_v2 = False
`, s3.AccessKey, s3.SecretKey, host, host, s3.Region))
	return &s3cmd{cfg: cfg}, err
}

func (s *s3cmd) run(ctx context.Context, args ...string) (string, error) {
	return run(ctx, "s3cmd", append([]string{"-c", s.cfg, "--no-progress"}, args...)...)
}

// keys lists the objects under the bucket.
func (s *s3cmd) keys(ctx context.Context) ([]string, error) {
	out, err := s.run(ctx, "ls", "-r", "s3://"+s3Bucket+"/")
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if i := strings.Index(line, "s3://"+s3Bucket+"/"); i >= 0 {
			keys = append(keys, strings.TrimPrefix(line[i:], "s3://"+s3Bucket+"/"))
		}
	}
	return keys, nil
}

func (s *s3cmd) rows(ctx context.Context) (rowSet, error) {
	keys, err := s.keys(ctx)
	if err != nil {
		return nil, err
	}
	got := rowSet{}
	for _, k := range keys {
		if !isDoc(k) {
			continue
		}
		doc, err := s.run(ctx, "get", "s3://"+s3Bucket+"/"+k, "-")
		if err != nil {
			return nil, err
		}
		if err := ndjsonRows(doc, got); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return got, nil
}

// marks are each object's ETag and Last-Modified, from s3cmd info (a HEAD request).
func (s *s3cmd) marks(ctx context.Context) (map[string]string, error) {
	keys, err := s.keys(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, k := range keys {
		out, err := s.run(ctx, "info", "s3://"+s3Bucket+"/"+k)
		if err != nil {
			return nil, err
		}
		var parts []string
		for _, line := range strings.Split(out, "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "Last mod:") || strings.HasPrefix(line, "MD5 sum:") || strings.HasPrefix(line, "ETag:") {
				parts = append(parts, line)
			}
		}
		if len(parts) == 0 {
			return nil, fmt.Errorf("s3cmd info %s printed no Last mod or MD5: %s", k, out)
		}
		unit := "meta:" + k
		if isDoc(k) {
			unit = "doc:" + k
		}
		m[unit] = strings.Join(parts, " ")
	}
	return m, nil
}

// --- gcs: the JSON API with net/http ------------------------------------------------------

type gcsReader struct{ endpoint, bucket string }

func createGCSBucket(ctx context.Context, endpoint, bucket string) error {
	_, err := httpJSON(ctx, http.MethodPost, endpoint+"/storage/v1/b?project=test", fmt.Sprintf(`{"name":%q}`, bucket))
	return err
}

// httpJSON sends body (when not empty) and returns the response body, failing on non-2xx.
func httpJSON(ctx context.Context, method, u, body string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return raw, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, raw)
	}
	return raw, nil
}

type gcsObject struct {
	Name, Generation, Metageneration, Md5Hash, Updated string
}

func (g *gcsReader) list(ctx context.Context) ([]gcsObject, error) {
	raw, err := httpJSON(ctx, http.MethodGet, g.endpoint+"/storage/v1/b/"+g.bucket+"/o", "")
	if err != nil {
		return nil, err
	}
	var out struct{ Items []gcsObject }
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

func (g *gcsReader) rows(ctx context.Context) (rowSet, error) {
	objs, err := g.list(ctx)
	if err != nil {
		return nil, err
	}
	got := rowSet{}
	for _, o := range objs {
		if !isDoc(o.Name) {
			continue
		}
		doc, err := httpJSON(ctx, http.MethodGet, g.endpoint+"/storage/v1/b/"+g.bucket+"/o/"+url.PathEscape(o.Name)+"?alt=media", "")
		if err != nil {
			return nil, err
		}
		if err := ndjsonRows(string(doc), got); err != nil {
			return nil, fmt.Errorf("%s: %w", o.Name, err)
		}
	}
	return got, nil
}

// marks are each object's generation and metageneration (every write makes a new generation).
func (g *gcsReader) marks(ctx context.Context) (map[string]string, error) {
	objs, err := g.list(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, o := range objs {
		unit := "meta:" + o.Name
		if isDoc(o.Name) {
			unit = "doc:" + o.Name
		}
		m[unit] = "generation " + o.Generation + "/" + o.Metageneration + " md5 " + o.Md5Hash + " updated " + o.Updated
	}
	return m, nil
}

// --- postgres: psql --------------------------------------------------------------------------

type pgReader struct{ url string }

func (p *pgReader) psql(ctx context.Context, sql string) (string, error) {
	return run(ctx, "psql", p.url, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-F", "\t", "-c", sql)
}

func (p *pgReader) rows(ctx context.Context) (rowSet, error) {
	out, err := p.psql(ctx, `SELECT json_build_object('cluster', cluster, 'inventory', inventory, 'target', target,
		'group', api_group, 'version', version, 'kind', kind, 'namespace', namespace, 'name', name, 'uid', uid,
		'profile', profile, 'profileGeneration', profile_generation, 'attributes', attributes) FROM kollect.rows`)
	if err != nil {
		return nil, err
	}
	return ndjsonOf(out)
}

func ndjsonOf(out string) (rowSet, error) {
	got := rowSet{}
	return got, ndjsonRows(out, got)
}

// marks: every row's and state row's xmin and ctid (any write makes a new tuple), and the
// insert, update and delete counts of every table of the schema (pg_stat_user_tables).
func (p *pgReader) marks(ctx context.Context) (map[string]string, error) {
	out, err := p.psql(ctx, `SELECT 'uid:' || uid, xmin::text || ' ' || ctid::text FROM kollect.rows
		UNION ALL SELECT 'meta:state ' || cluster || '/' || inventory, xmin::text || ' ' || ctid::text || ' ' || checksum FROM kollect.rows_state
		UNION ALL SELECT 'counter:pg_stat ' || relname, 'ins ' || n_tup_ins || ' upd ' || n_tup_upd || ' del ' || n_tup_del
		  FROM pg_stat_user_tables WHERE schemaname = 'kollect'`)
	if err != nil {
		return nil, err
	}
	return tabMarks(out)
}

func tabMarks(out string) (map[string]string, error) {
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, ok := strings.Cut(line, "\t")
		if !ok {
			return nil, fmt.Errorf("unexpected line %q", line)
		}
		m[k] = v
	}
	return m, nil
}

// --- mongodb: pymongo ------------------------------------------------------------------------

type mongoReader struct{ uri string }

// mongoScript prints the rows collection and the state collection as JSON, with pymongo.
const mongoScript = `
import json, sys
import pymongo
c = pymongo.MongoClient(sys.argv[1], serverSelectionTimeoutMS=10000)
db = c[sys.argv[2]]
out = {"rows": list(db["rows"].find({})), "state": list(db["rows_state"].find({}))}
print(json.dumps(out, default=str, sort_keys=True))
`

type mongoDump struct {
	Rows []struct {
		ID                                                         string `json:"_id"`
		Cluster, Inventory, Target, Version, Kind, Namespace, Name string
		UID                                                        string          `json:"uid"`
		APIGroup                                                   string          `json:"api_group"`
		Profile                                                    string          `json:"profile"`
		ProfileGeneration                                          int64           `json:"profile_generation"`
		Attributes                                                 json.RawMessage `json:"attributes"`
		Digest                                                     string          `json:"digest"`
		FirstSeen                                                  string          `json:"first_seen"`
		UpdatedAt                                                  string          `json:"updated_at"`
	}
	State []map[string]any
}

func (m *mongoReader) dump(ctx context.Context) (*mongoDump, error) {
	out, err := run(ctx, "/usr/bin/python3", "-c", mongoScript, m.uri, mongoDBName)
	if err != nil {
		return nil, err
	}
	var d mongoDump
	return &d, json.Unmarshal([]byte(out), &d)
}

func (m *mongoReader) rows(ctx context.Context) (rowSet, error) {
	d, err := m.dump(ctx)
	if err != nil {
		return nil, err
	}
	got := rowSet{}
	for _, r := range d.Rows {
		cr := contractRow{Cluster: r.Cluster, Inventory: r.Inventory, Target: r.Target, Group: r.APIGroup, Version: r.Version,
			Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, UID: r.UID, Profile: r.Profile,
			ProfileGeneration: r.ProfileGeneration, Attributes: r.Attributes}
		row, err := cr.row()
		if err != nil {
			return nil, err
		}
		if want := row.Cluster + "/" + row.Inventory + "/" + row.Target + "/" + row.UID; r.ID != want {
			return nil, fmt.Errorf("document _id %q, want the identity %q", r.ID, want)
		}
		got[row.key()] = row
	}
	return got, nil
}

// marks: every document's updated_at, first_seen and digest, and the state documents (their
// exported_at moves on every write).
func (m *mongoReader) marks(ctx context.Context) (map[string]string, error) {
	d, err := m.dump(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range d.Rows {
		out["uid:"+r.UID] = r.UpdatedAt + " " + r.FirstSeen + " " + r.Digest
	}
	for _, s := range d.State {
		raw, _ := json.Marshal(s)
		out[fmt.Sprintf("meta:state %v", s["_id"])] = string(raw)
	}
	return out, nil
}

// --- bigquery: the REST API with net/http --------------------------------------------------

type bqReader struct{ endpoint string }

func (b *bqReader) query(ctx context.Context, sql string) ([][]string, error) {
	body, _ := json.Marshal(map[string]any{"query": sql, "useLegacySql": false})
	raw, err := httpJSON(ctx, http.MethodPost, b.endpoint+"/bigquery/v2/projects/"+bqProject+"/queries", string(body))
	if err != nil {
		return nil, err
	}
	var out struct {
		JobComplete bool
		Rows        []struct {
			F []struct{ V any } `json:"f"`
		}
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	var rows [][]string
	for _, r := range out.Rows {
		var cells []string
		for _, f := range r.F {
			switch v := f.V.(type) {
			case string:
				cells = append(cells, v)
			case nil:
				cells = append(cells, "")
			default:
				raw, _ := json.Marshal(v)
				cells = append(cells, string(raw))
			}
		}
		rows = append(rows, cells)
	}
	return rows, nil
}

func (b *bqReader) table(name string) string {
	return "`" + bqProject + "." + bqDataset + "." + name + "`"
}

func (b *bqReader) rows(ctx context.Context) (rowSet, error) {
	rows, err := b.query(ctx, `SELECT cluster, inventory, target, api_group, version, kind, namespace, name, uid,
		TO_JSON_STRING(attributes), profile, CAST(profile_generation AS STRING) FROM `+b.table("rows"))
	if err != nil {
		return nil, err
	}
	got := rowSet{}
	for _, c := range rows {
		if len(c) != 12 {
			return nil, fmt.Errorf("row of %d cells: %v", len(c), c)
		}
		gen, err := strconv.ParseInt(c[11], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("profile_generation %q: %w", c[11], err)
		}
		r, err := contractRow{Cluster: c[0], Inventory: c[1], Target: c[2], Group: c[3], Version: c[4], Kind: c[5],
			Namespace: c[6], Name: c[7], UID: c[8], Profile: c[10], ProfileGeneration: gen, Attributes: json.RawMessage(c[9])}.row()
		if err != nil {
			return nil, err
		}
		if _, dup := got[r.key()]; dup {
			return nil, fmt.Errorf("identity %s appears twice", r.key())
		}
		got[r.key()] = r
	}
	return got, nil
}

// marks: every row's updated_at and first_seen, the state rows, the tables of the dataset and
// the lastModifiedTime and numRows of the rows and state tables.
func (b *bqReader) marks(ctx context.Context) (map[string]string, error) {
	m := map[string]string{}
	rows, err := b.query(ctx, `SELECT uid, CAST(updated_at AS STRING), CAST(first_seen AS STRING) FROM `+b.table("rows"))
	if err != nil {
		return nil, err
	}
	for _, c := range rows {
		m["uid:"+c[0]] = strings.Join(c[1:], " ")
	}
	state, err := b.query(ctx, `SELECT cluster, inventory, checksum, CAST(item_count AS STRING), CAST(exported_at AS STRING) FROM `+b.table("rows_state"))
	if err != nil {
		return nil, err
	}
	for _, c := range state {
		m["meta:state "+c[0]+"/"+c[1]] = strings.Join(c[2:], " ")
	}
	base := b.endpoint + "/bigquery/v2/projects/" + bqProject + "/datasets/" + bqDataset + "/tables"
	raw, err := httpJSON(ctx, http.MethodGet, base, "")
	if err != nil {
		return nil, err
	}
	var list struct {
		Tables []struct {
			TableReference struct{ TableID string } `json:"tableReference"`
		}
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, err
	}
	var names []string
	for _, tb := range list.Tables {
		names = append(names, tb.TableReference.TableID)
	}
	sort.Strings(names)
	m["counter:tables"] = strings.Join(names, ",")
	for _, name := range []string{"rows", "rows_state"} {
		raw, err := httpJSON(ctx, http.MethodGet, base+"/"+name, "")
		if err != nil {
			return nil, err
		}
		var tb struct{ LastModifiedTime, NumRows string }
		if err := json.Unmarshal(raw, &tb); err != nil {
			return nil, err
		}
		m["counter:table "+name] = "lastModifiedTime " + tb.LastModifiedTime + " numRows " + tb.NumRows
	}
	return m, nil
}

// --- kafka: kcat -----------------------------------------------------------------------------

type kafkaReader struct{ addr string }

type kcatRecord struct {
	Partition int
	Offset    int64
	Key       *string
	Payload   *string
	// Headers are kcat's flat list: name, value, name, value, ...
	Headers []string
}

func (k *kafkaReader) records(ctx context.Context) ([]kcatRecord, error) {
	out, err := run(ctx, "kcat", "-C", "-b", k.addr, "-t", kafkaTopic, "-e", "-q", "-J", "-o", "beginning")
	if err != nil {
		return nil, err
	}
	var recs []kcatRecord
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r kcatRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("kcat line %q: %w", line, err)
		}
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	return recs, nil
}

// header is the value of the record's header name, "" without it.
func (r *kcatRecord) header(name string) string {
	for i := 0; i+1 < len(r.Headers); i += 2 {
		if r.Headers[i] == name {
			return r.Headers[i+1]
		}
	}
	return ""
}

// changeEvent is the export contract's change event, as consumers decode it.
type changeEvent struct {
	Type, Key string
	Row       *contractRow
}

// fold applies change events in order per key: the consumer's view of the latest state.
func fold(events []changeEvent) (rowSet, error) {
	got := rowSet{}
	byKey := map[string]string{} // event key -> row key
	for _, e := range events {
		switch e.Type {
		case "upsert":
			if e.Row == nil {
				return nil, fmt.Errorf("upsert %s without a row", e.Key)
			}
			r, err := e.Row.row()
			if err != nil {
				return nil, err
			}
			if want := r.Cluster + "/" + r.Inventory + "/" + r.Target + "/" + r.UID; e.Key != want {
				return nil, fmt.Errorf("event key %q, want the identity %q", e.Key, want)
			}
			got[r.key()] = r
			byKey[e.Key] = r.key()
		case "delete", "tombstone":
			// A delete of a key never upserted is a consumer's no-op. events.md allows it:
			// after a failed export the sink re-sends the current state of every key the
			// attempt may have delivered, and for a row added and deleted during an outage
			// that state is a delete. The suites bound such events by the write markers of
			// untouched keys and by the outage test's per-key check.
			if rk, ok := byKey[e.Key]; ok {
				delete(got, rk)
			}
		default:
			return nil, fmt.Errorf("event %s of unknown type %q", e.Key, e.Type)
		}
	}
	return got, nil
}

func (k *kafkaReader) rows(ctx context.Context) (rowSet, error) {
	recs, err := k.records(ctx)
	if err != nil {
		return nil, err
	}
	var events []changeEvent
	for _, r := range recs {
		if r.Key == nil {
			return nil, fmt.Errorf("record %d/%d without a key", r.Partition, r.Offset)
		}
		if r.header("kollect-event") == "state" {
			continue // the inventory's state record (kafka.md): no row
		}
		if r.Payload == nil {
			events = append(events, changeEvent{Type: "tombstone", Key: *r.Key})
			continue
		}
		var e changeEvent
		if err := json.Unmarshal([]byte(*r.Payload), &e); err != nil {
			return nil, fmt.Errorf("record %d/%d: %w", r.Partition, r.Offset, err)
		}
		if e.Key != *r.Key {
			return nil, fmt.Errorf("record key %q but event key %q", *r.Key, e.Key)
		}
		events = append(events, e)
	}
	return fold(events)
}

// marks: the topic's end offsets per partition (kcat -Q, the broker's high watermarks) and the
// records per key.
func (k *kafkaReader) marks(ctx context.Context) (map[string]string, error) {
	meta, err := run(ctx, "kcat", "-L", "-b", k.addr, "-t", kafkaTopic, "-J")
	if err != nil {
		return nil, err
	}
	var md struct {
		Topics []struct {
			Partitions []struct{ Partition int }
		}
	}
	if err := json.Unmarshal([]byte(meta), &md); err != nil || len(md.Topics) != 1 {
		return nil, fmt.Errorf("kcat -L: %v: %s", err, meta)
	}
	args := []string{"-Q", "-b", k.addr}
	for _, p := range md.Topics[0].Partitions {
		args = append(args, "-t", fmt.Sprintf("%s:%d:-1", kafkaTopic, p.Partition))
	}
	ends, err := run(ctx, "kcat", args...)
	if err != nil {
		return nil, err
	}
	m := map[string]string{"counter:end offsets": strings.Join(strings.Fields(ends), " ")}
	recs, err := k.records(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		switch {
		case r.Key == nil:
		case r.header("kollect-event") == "state":
			m["meta:state "+*r.Key] += fmt.Sprintf("%d/%d ", r.Partition, r.Offset)
		default:
			u := "uid:" + (*r.Key)[strings.LastIndexByte(*r.Key, '/')+1:]
			m[u] += fmt.Sprintf("%d/%d ", r.Partition, r.Offset)
		}
	}
	return m, nil
}

// --- nats: the nats CLI ----------------------------------------------------------------------

type natsReader struct {
	cli, url string
	mu       sync.Mutex
	// cache holds the messages read so far per stream, by sequence, for the stream created at
	// created[stream]: a stream deleted and created again reuses sequence numbers.
	cache   map[string]map[uint64]natsMsg
	created map[string]string
}

type natsMsg struct {
	Subject string
	Seq     uint64
	Header  string
	Data    []byte
}

func (n *natsReader) nats(ctx context.Context, args ...string) (string, error) {
	return run(ctx, n.cli, append([]string{"--server", n.url}, args...)...)
}

// seqs reads a stream's first and last sequence numbers (nats stream info).
func (n *natsReader) seqs(ctx context.Context, stream string) (first, last uint64, err error) {
	first, last, _, err = n.streamState(ctx, stream)
	return first, last, err
}

// streamState is seqs and the stream's creation time.
func (n *natsReader) streamState(ctx context.Context, stream string) (first, last uint64, created string, err error) {
	out, err := n.nats(ctx, "stream", "info", stream, "--json")
	if err != nil {
		return 0, 0, "", err
	}
	var info struct {
		Created string
		State   struct {
			FirstSeq uint64 `json:"first_seq"`
			LastSeq  uint64 `json:"last_seq"`
		}
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return 0, 0, "", fmt.Errorf("stream info %s: %w: %s", stream, err, out)
	}
	return info.State.FirstSeq, info.State.LastSeq, info.Created, nil
}

// messages returns the stream's messages, reading only those not read before (a KV stream
// drops superseded revisions: a sequence that is gone is skipped).
func (n *natsReader) messages(ctx context.Context, stream string) ([]natsMsg, error) {
	first, last, created, err := n.streamState(ctx, stream)
	if err != nil {
		return nil, err
	}
	if n.created == nil {
		n.created = map[string]string{}
	}
	if n.created[stream] != created {
		n.cache[stream], n.created[stream] = nil, created
	}
	c := n.cache[stream]
	if c == nil {
		c = map[uint64]natsMsg{}
		n.cache[stream] = c
	}
	var max uint64
	for s := range c {
		if s > max {
			max = s
		}
	}
	from := max + 1
	if first > from {
		from = first
	}
	for seq := from; seq <= last && seq > 0; seq++ {
		out, err := n.nats(ctx, "stream", "get", stream, strconv.FormatUint(seq, 10), "--json")
		if err != nil {
			if strings.Contains(err.Error(), "no message found") {
				continue
			}
			return nil, err
		}
		var raw struct {
			Subject string
			Seq     uint64
			Hdrs    []byte
			Data    []byte
		}
		if err := json.Unmarshal([]byte(out), &raw); err != nil {
			return nil, fmt.Errorf("stream get %s %d: %w: %s", stream, seq, err, out)
		}
		c[seq] = natsMsg{Subject: raw.Subject, Seq: raw.Seq, Header: string(raw.Hdrs), Data: raw.Data}
	}
	var msgs []natsMsg
	for _, m := range c {
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool { return msgs[i].Seq < msgs[j].Seq })
	return msgs, nil
}

func (n *natsReader) streamRows(ctx context.Context) (rowSet, []natsMsg, error) {
	msgs, err := n.messages(ctx, natsStream)
	if err != nil {
		return nil, nil, err
	}
	var events []changeEvent
	rowMsgs := msgs[:0:0]
	for _, m := range msgs {
		if strings.Contains(m.Header, "Kollect-Event: state") {
			continue // the inventory's state message (nats.md): no row
		}
		rowMsgs = append(rowMsgs, m)
		var e changeEvent
		if err := json.Unmarshal(m.Data, &e); err != nil {
			return nil, nil, fmt.Errorf("stream message %d: %w", m.Seq, err)
		}
		if !strings.Contains(m.Header, "Kollect-Key: "+e.Key) {
			return nil, nil, fmt.Errorf("stream message %d: header %q lacks Kollect-Key %s", m.Seq, m.Header, e.Key)
		}
		events = append(events, e)
	}
	got, err := fold(events)
	return got, rowMsgs, err
}

// kvRows is the bucket's content: the latest revision per key, deleted keys left out.
func (n *natsReader) kvRows(ctx context.Context) (rowSet, []natsMsg, error) {
	msgs, err := n.messages(ctx, "KV_"+natsBucket)
	if err != nil {
		return nil, nil, err
	}
	latest := map[string]natsMsg{}
	for _, m := range msgs {
		latest[m.Subject] = m
	}
	got := rowSet{}
	for subj, m := range latest {
		if strings.Contains(m.Header, "KV-Operation: DEL") || strings.Contains(m.Header, "KV-Operation: PURGE") {
			continue
		}
		var c contractRow
		if err := json.Unmarshal(m.Data, &c); err != nil {
			return nil, nil, fmt.Errorf("KV %s: %w", subj, err)
		}
		r, err := c.row()
		if err != nil {
			return nil, nil, err
		}
		got[r.key()] = r
	}
	return got, msgs, nil
}

func (n *natsReader) rows(ctx context.Context) (rowSet, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	stream, _, err := n.streamRows(ctx)
	if err != nil {
		return nil, err
	}
	kv, _, err := n.kvRows(ctx)
	if err != nil {
		return nil, err
	}
	if d := diffRows(stream, kv); d != "" {
		return nil, fmt.Errorf("the KV bucket %s differs from the stream's latest state:\n  %s", natsBucket, d)
	}
	return stream, nil
}

// marks: the last sequence numbers of the stream and of the bucket's stream, and per key the
// sequences of its messages.
func (n *natsReader) marks(ctx context.Context) (map[string]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := map[string]string{}
	for _, s := range []string{natsStream, "KV_" + natsBucket} {
		first, last, err := n.seqs(ctx, s)
		if err != nil {
			return nil, err
		}
		m["counter:"+s] = fmt.Sprintf("first_seq %d last_seq %d", first, last)
	}
	_, msgs, err := n.streamRows(ctx)
	if err != nil {
		return nil, err
	}
	for _, msg := range msgs {
		var e changeEvent
		_ = json.Unmarshal(msg.Data, &e)
		m["uid:"+e.Key[strings.LastIndexByte(e.Key, '/')+1:]] += fmt.Sprintf("stream %d ", msg.Seq)
	}
	_, kvMsgs, err := n.kvRows(ctx)
	if err != nil {
		return nil, err
	}
	for _, msg := range kvMsgs {
		m["uid:"+msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]] += fmt.Sprintf("kv %d ", msg.Seq)
	}
	return m, nil
}
