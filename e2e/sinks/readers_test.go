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
	var paths, blobs []string
	for path, blob := range files {
		if isDoc(path) {
			paths, blobs = append(paths, path), append(blobs, blob)
		}
	}
	docs, err := g.catFiles(ctx, blobs)
	if err != nil {
		return nil, err
	}
	got := rowSet{}
	for i, doc := range docs {
		if err := ndjsonRows(doc, got); err != nil {
			return nil, fmt.Errorf("%s: %w", paths[i], err)
		}
	}
	return got, nil
}

// catFiles reads blobs with one `git cat-file --batch`, in order.
func (g *gitReader) catFiles(ctx context.Context, blobs []string) ([]string, error) {
	if len(blobs) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "--git-dir", g.dir, "cat-file", "--batch")
	cmd.Stdin = strings.NewReader(strings.Join(blobs, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git cat-file --batch: %w", err)
	}
	r := bufio.NewReader(bytes.NewReader(out))
	docs := make([]string, 0, len(blobs))
	for range blobs {
		header, err := r.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("git cat-file --batch: %w", err)
		}
		f := strings.Fields(header) // <oid> blob <size>
		if len(f) != 3 {
			return nil, fmt.Errorf("git cat-file --batch: unexpected header %q", header)
		}
		size, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("git cat-file --batch: header %q: %w", header, err)
		}
		buf := make([]byte, size+1) // the content and its newline
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("git cat-file --batch: %w", err)
		}
		docs = append(docs, string(buf[:size]))
	}
	return docs, nil
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
// insert, update and delete counts of every table of the schema, counted by a row trigger the
// reader installs (countWrites): unlike pg_stat_user_tables, which an idle backend publishes
// up to 10 s late, the counts commit with the writes they count, so a read after the agent's
// export is exact.
func (p *pgReader) marks(ctx context.Context) (map[string]string, error) {
	if _, err := p.psql(ctx, countWrites); err != nil {
		return nil, fmt.Errorf("installing the write-counting triggers: %w", err)
	}
	out, err := p.psql(ctx, `SELECT 'uid:' || uid, xmin::text || ' ' || ctid::text FROM kollect.rows
		UNION ALL SELECT 'meta:state ' || cluster || '/' || inventory, xmin::text || ' ' || ctid::text || ' ' || checksum FROM kollect.rows_state
		UNION ALL SELECT 'counter:writes ' || relname, 'ins ' || count(*) FILTER (WHERE op = 'INSERT') ||
		  ' upd ' || count(*) FILTER (WHERE op = 'UPDATE') || ' del ' || count(*) FILTER (WHERE op = 'DELETE')
		  FROM e2e_counters.writes GROUP BY relname`)
	if err != nil {
		return nil, err
	}
	return tabMarks(out)
}

// countWrites makes every table of the sink's schema log each row it inserts, updates or
// deletes into e2e_counters.writes, idempotently: a table the agent created since the last
// read gets its trigger then. The log is append-only (one row per write, no shared counter
// row) so that the agent's concurrent transactions never wait on, or deadlock over, the
// test's bookkeeping.
const countWrites = `
CREATE SCHEMA IF NOT EXISTS e2e_counters;
CREATE TABLE IF NOT EXISTS e2e_counters.writes (relname text NOT NULL, op text NOT NULL);
CREATE OR REPLACE FUNCTION e2e_counters.count_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO e2e_counters.writes VALUES (TG_TABLE_NAME, TG_OP);
  RETURN NULL;
END $$;
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'kollect' AND c.relkind IN ('r', 'p')
      AND NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = c.oid AND g.tgname = 'e2e_count_writes')
  LOOP
    EXECUTE format('CREATE TRIGGER e2e_count_writes AFTER INSERT OR UPDATE OR DELETE ON kollect.%I FOR EACH ROW EXECUTE FUNCTION e2e_counters.count_write()', r.relname);
  END LOOP;
END $$;`

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

// mongoScript prints, with pymongo, the rows a reader sees with the query of
// docs/sinks/mongodb.md ("Reading complete exports": the state documents' generations, the row
// documents they show, the generations again, read again while one moved), the state
// collection, and every row document as it is (for the write markers).
const mongoScript = `
import json, sys
import pymongo
c = pymongo.MongoClient(sys.argv[1], serverSelectionTimeoutMS=10000)
db = c[sys.argv[2]]
def generations():
    return {str(s["_id"]): s.get("generation") or 0 for s in db["rows_state"].find({})}
for attempt in range(5):
    states = list(db["rows_state"].find({}))
    gens = {str(s["_id"]): s.get("generation") or 0 for s in states}
    complete = [{"cluster": s["cluster"], "inventory": s["inventory"],
                 "gen": {"$not": {"$gt": s.get("generation") or 0}},
                 "gen_end": {"$not": {"$lte": s.get("generation") or 0}}} for s in states]
    rows = list(db["rows"].find({"$or": complete})) if complete else []
    if generations() == gens:
        break
else:
    sys.exit("the generations kept moving over 5 reads")
out = {"rows": rows, "state": states, "documents": list(db["rows"].find({}))}
print(json.dumps(out, default=str, sort_keys=True))
`

type mongoDump struct {
	// Rows are what a reader of complete exports sees; Documents every row document.
	Rows, Documents []struct {
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
		// A version's _id is the identity, and "@<generation>" for versions written by an
		// export with generations.
		if want := row.Cluster + "/" + row.Inventory + "/" + row.Target + "/" + row.UID; r.ID != want && !strings.HasPrefix(r.ID, want+"@") {
			return nil, fmt.Errorf("document _id %q, want the identity %q", r.ID, want)
		}
		if _, dup := got[row.key()]; dup {
			return nil, fmt.Errorf("the complete read shows row %s twice", row.key())
		}
		got[row.key()] = row
	}
	return got, nil
}

// marks: every row document's _id, updated_at, first_seen and digest (a changed row is a new
// version, a new _id), and the state documents (their exported_at moves on every write).
func (m *mongoReader) marks(ctx context.Context) (map[string]string, error) {
	d, err := m.dump(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range d.Documents {
		out["uid:"+r.UID] += r.ID + " " + r.UpdatedAt + " " + r.FirstSeen + " " + r.Digest + " "
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
