package mongodb

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink/sinktest"
)

// docFind is one db.<collection>.find(filter, projection)[.sort(order)] of the documentation,
// its arguments as the page writes them (JSON with mongosh variables in places of values).
type docFind struct {
	collection, filter, projection, sort string
}

// balanced returns the {…} object at the start of s (strings may hold braces) and the rest.
func balanced(t *testing.T, s string) (string, string) {
	t.Helper()
	if !strings.HasPrefix(s, "{") {
		t.Fatalf("expected an object at %.40q", s)
	}
	depth, inString := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				return s[:i+1], s[i+1:]
			}
		}
	}
	t.Fatalf("unbalanced object at %.40q", s)
	return "", ""
}

// docCoverageQuery reads the three finds of the coverage question from docs/sinks/mongodb.md.
func docCoverageQuery(t *testing.T) []docFind {
	t.Helper()
	raw, err := os.ReadFile("../../../../docs/sinks/mongodb.md")
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, m := range regexp.MustCompile("(?s)```js\n(.*?)```").FindAllStringSubmatch(string(raw), -1) {
		if strings.Contains(m[1], "db.rows_coverage.find(") {
			block = m[1]
		}
	}
	// The test substitutes `since` itself: the page must compute it as 15 minutes ago.
	if !strings.Contains(block, "const since = new Date(Date.now() - 15 * 60 * 1000)") {
		t.Fatalf("the coverage question's block changed its time window; update the test:\n%s", block)
	}
	var out []docFind
	find := regexp.MustCompile(`db\.(\w+)\.find\(`)
	for rest := block; ; {
		loc := find.FindStringSubmatchIndex(rest)
		if loc == nil {
			break
		}
		f := docFind{collection: rest[loc[2]:loc[3]]}
		f.filter, rest = balanced(t, rest[loc[1]:])
		rest = strings.TrimLeft(strings.TrimPrefix(strings.TrimSpace(rest), ","), " \n")
		f.projection, rest = balanced(t, rest)
		if after, ok := strings.CutPrefix(rest, ").sort("); ok {
			f.sort, rest = balanced(t, after)
		}
		out = append(out, f)
	}
	if len(out) != 3 {
		t.Fatalf("found %d finds in the coverage question, want 3:\n%s", len(out), block)
	}
	return out
}

// TestDocCoverageQueryAnswers runs the documented "Deployments in prod clusters whose data is
// complete and confirmed within 15 minutes" finds, read from the page, against FerretDB over a
// fleet with one cluster of each kind of answer: only prod-a's Deployments qualify.
func TestDocCoverageQueryAnswers(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	exportAs := func(cluster string, deployments export.Coverage, at time.Time) {
		t.Helper()
		s, _ := newSink(t, db, cluster)
		a := &agent{sink: s, cluster: cluster, inventory: "apps", coverage: []export.Coverage{deployments, complete("services", 1)}}
		b := a.batch(append(sinktest.Deployments(cluster, "apps", 2, 1), services(cluster, "apps", 1)...))
		b.Envelope.ExportedAt = at
		if err := s.Export(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	exportAs("prod-a", complete("deployments", 2), now)                                          // the answer
	exportAs("prod-b", export.Coverage{Target: "deployments", State: "forbidden", Rows: 2}, now) // kept rows, unknown
	exportAs("prod-c", complete("deployments", 2), now.Add(-time.Hour))                          // complete, not confirmed lately
	exportAs("staging-a", complete("deployments", 2), now)                                       // not prod

	since := now.Add(-15 * time.Minute).UTC().Format(time.RFC3339Nano)
	vars := map[string]string{"since": `{"$date": "` + since + `"}`}
	variable := regexp.MustCompile(`(:\s*)(since|fresh|complete)\b`)
	var results []bson.M
	for i, f := range docCoverageQuery(t) {
		filter := variable.ReplaceAllStringFunc(f.filter, func(m string) string {
			sub := variable.FindStringSubmatch(m)
			v, ok := vars[sub[2]]
			if !ok {
				t.Fatalf("step %d uses %s before a step defined it", i+1, sub[2])
			}
			return sub[1] + v
		})
		var fd, pd bson.D
		if err := bson.UnmarshalExtJSON([]byte(filter), false, &fd); err != nil {
			t.Fatalf("step %d filter %s: %v", i+1, filter, err)
		}
		if err := bson.UnmarshalExtJSON([]byte(f.projection), false, &pd); err != nil {
			t.Fatalf("step %d projection %s: %v", i+1, f.projection, err)
		}
		opts := options.Find().SetProjection(pd)
		if f.sort != "" {
			var sd bson.D
			if err := bson.UnmarshalExtJSON([]byte(f.sort), false, &sd); err != nil {
				t.Fatalf("step %d sort %s: %v", i+1, f.sort, err)
			}
			opts.SetSort(sd)
		}
		cur, err := collection(t, db, f.collection).Find(ctx, fd, opts)
		if err != nil {
			t.Fatalf("step %d: db.%s.find(%s): %v", i+1, f.collection, filter, err)
		}
		results = nil
		if err := cur.All(ctx, &results); err != nil {
			t.Fatal(err)
		}
		if len(results) == 0 {
			t.Fatalf("step %d: db.%s.find(%s) found nothing", i+1, f.collection, filter)
		}
		// The step's documents, as the next step's $or clauses.
		ext, err := bson.MarshalExtJSON(bson.M{"v": results}, false, false)
		if err != nil {
			t.Fatal(err)
		}
		name := map[int]string{0: "fresh", 1: "complete"}[i]
		vars[name] = strings.TrimSuffix(strings.TrimPrefix(string(ext), `{"v":`), "}")
	}
	var got []string
	for _, r := range results {
		got = append(got, r["cluster"].(string)+"/"+r["namespace"].(string)+"/"+r["name"].(string))
	}
	if want := "prod-a/ns-0/app-00000 prod-a/ns-1/app-00001"; strings.Join(got, " ") != want {
		t.Fatalf("the documented query answers %v, want %s", got, want)
	}
}
