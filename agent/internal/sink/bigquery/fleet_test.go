package bigquery

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"kollect.dev/agent/internal/export"
)

// fleetQueries reads the SQL of the fleet questions in docs/sinks/bigquery.md, so that the
// documented queries are the tested ones.
func fleetQueries(t *testing.T) []string {
	t.Helper()
	_, section, ok := strings.Cut(readDoc(t), "## Fleet questions")
	if !ok {
		t.Fatal("docs/sinks/bigquery.md has no fleet questions section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	out := sqlBlocks(section)
	if len(out) != 4 {
		t.Fatalf("%d fleet queries in the docs, want 4", len(out))
	}
	return out
}

func readDoc(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../../../docs/sinks/bigquery.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

// sqlBlocks returns the contents of the sql code blocks of a page's text.
func sqlBlocks(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestDocumentedFleetQueries(t *testing.T) {
	ctx := context.Background()
	ds := newDataset(t)
	for _, cluster := range []string{"east", "west"} {
		s, _ := newSink(t, ds, cluster)
		rows := make([]export.Row, 3)
		for i := range rows {
			rows[i] = mkRow(cluster, i, map[string]any{"images": []any{fmt.Sprintf("app:%d", i), "envoy:1.30"}})
		}
		rows = append(rows, mkRow(cluster, 3, map[string]any{"image": "app:0"}))
		if err := (&agent{sink: s, cluster: cluster, inventory: "apps"}).export(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	qs := fleetQueries(t)
	run := func(sql string) [][]any {
		var out [][]any
		for _, row := range query(t, strings.ReplaceAll(sql, "acme-fleet.kollect.", server.Project+"."+ds+".")) {
			r := make([]any, len(row))
			for i := range row {
				r[i] = row[i]
			}
			out = append(out, r)
		}
		return out
	}
	// Latest rows of kind Deployment: 4 objects in each cluster.
	if got := run(qs[0]); len(got) != 8 {
		t.Fatalf("latest rows: %d rows: %v", len(got), got)
	}
	// Counts per cluster and kind.
	counts := run(qs[1])
	if len(counts) != 2 || counts[0][0] != "east" || counts[0][3] != int64(4) || counts[1][0] != "west" || counts[1][3] != int64(4) {
		t.Fatalf("counts %v", counts)
	}
	// Images: envoy:1.30 in 6 objects of 2 clusters; app:0 in 4 objects (images and image).
	images := map[string][]any{}
	for _, r := range run(qs[2]) {
		images[r[0].(string)] = r
	}
	if r := images["envoy:1.30"]; r == nil || r[1] != int64(2) || r[2] != int64(6) {
		t.Fatalf("envoy usage %v (all: %v)", r, images)
	}
	if r := images["app:0"]; r == nil || r[1] != int64(2) || r[2] != int64(4) {
		t.Fatalf("app:0 usage %v (all: %v)", r, images)
	}
	// Confirmed within 15 minutes: every Deployment just exported (an export confirms).
	if got := run(qs[3]); len(got) != 8 || got[0][4] == nil {
		t.Fatalf("confirmed rows: %d rows: %v", len(got), got)
	}
}
