package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// fleet exports a small two-cluster fleet: deployments with images and a service.
func fleet(t *testing.T) (db string, s *Sink) {
	t.Helper()
	ctx := context.Background()
	db = newDatabase(t)
	for _, cluster := range []string{"east", "west"} {
		sink, _ := newSink(t, db, cluster)
		if cluster == "east" {
			s = sink
		}
		rows := []export.Row{
			sinktest.Deployment(cluster, "apps", 1, map[string]any{"images": []any{"nginx:1.27", "envoy:1.30"}, "team": "a"}),
			sinktest.Deployment(cluster, "apps", 2, map[string]any{"images": []any{"nginx:1.27"}, "team": "b"}),
		}
		svc := sinktest.Deployment(cluster, "apps", 3, map[string]any{"image": cluster + "-only:1", "team": "a", "labels": map[string]any{"tier": "web", "x": "y"}}).
			With(func(o *export.Origin) { o.Kind, o.Group, o.Target = "Service", "", "services" })
		rows = append(rows, svc)
		if err := (&agent{sink: sink, cluster: cluster, inventory: "apps"}).export(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	return db, s
}

func TestQueryFilters(t *testing.T) {
	ctx := context.Background()
	_, s := fleet(t)
	keys := func(recs []sink.StoredRow) []string {
		var out []string
		for _, r := range recs {
			out = append(out, r.Cluster+"/"+r.Kind+"/"+r.Name)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    sink.RowFilter
		want []string
	}{
		{"everything", sink.RowFilter{}, []string{"east/Deployment/app-00001", "east/Deployment/app-00002", "east/Service/app-00003",
			"west/Deployment/app-00001", "west/Deployment/app-00002", "west/Service/app-00003"}},
		{"cluster and kind", sink.RowFilter{Cluster: "west", Kind: "Service"}, []string{"west/Service/app-00003"}},
		{"namespace and name", sink.RowFilter{Namespace: "ns-2", Name: "app-00002"}, []string{"east/Deployment/app-00002", "west/Deployment/app-00002"}},
		{"attribute equality", sink.RowFilter{Attributes: map[string]any{"team": "a"}, Cluster: "east"}, []string{"east/Deployment/app-00001", "east/Service/app-00003"}},
		{"nested attribute", sink.RowFilter{Attributes: map[string]any{"labels": map[string]any{"tier": "web"}}}, []string{"east/Service/app-00003", "west/Service/app-00003"}},
		{"no match", sink.RowFilter{Attributes: map[string]any{"team": "zzz"}}, nil},
		{"limit", sink.RowFilter{Limit: 2}, []string{"east/Deployment/app-00001", "east/Deployment/app-00002"}},
		{"injection is a value", sink.RowFilter{Name: "x' OR '1'='1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Query(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(keys(got), tc.want) {
				t.Fatalf("got %v, want %v", keys(got), tc.want)
			}
		})
	}
}

func TestFleetViews(t *testing.T) {
	ctx := context.Background()
	db, _ := fleet(t)
	pool := connect(t, db)
	// The same object collected by a second inventory appears once in _latest.
	west, _ := newSink(t, db, "west")
	dup := sinktest.Deployment("west", "other", 1, map[string]any{"images": []any{"nginx:1.27", "envoy:1.30"}, "team": "a"})
	if err := (&agent{sink: west, cluster: "west", inventory: "other"}).export(ctx, []export.Row{dup}); err != nil {
		t.Fatal(err)
	}
	if got := count(t, pool, `SELECT count(*) FROM kollect.rows_latest WHERE cluster = 'west'`); got != 3 {
		t.Fatalf("rows_latest holds %d west objects, want 3", got)
	}
	rows, err := pool.Query(ctx, `SELECT cluster, kind, objects FROM kollect.rows_counts ORDER BY cluster, kind`)
	if err != nil {
		t.Fatal(err)
	}
	var counts []string
	for rows.Next() {
		var c, k string
		var n int
		if err := rows.Scan(&c, &k, &n); err != nil {
			t.Fatal(err)
		}
		counts = append(counts, fmt.Sprintf("%s/%s=%d", c, k, n))
	}
	if want := []string{"east/Deployment=2", "east/Service=1", "west/Deployment=2", "west/Service=1"}; !slices.Equal(counts, want) {
		t.Fatalf("counts %v, want %v", counts, want)
	}
	rows, err = pool.Query(ctx, `SELECT image, clusters, objects, cluster_names FROM kollect.rows_image_usage ORDER BY image`)
	if err != nil {
		t.Fatal(err)
	}
	var usage []string
	for rows.Next() {
		var img string
		var clusters, objects int
		var names []string
		if err := rows.Scan(&img, &clusters, &objects, &names); err != nil {
			t.Fatal(err)
		}
		usage = append(usage, fmt.Sprintf("%s:%d/%d%v", img, clusters, objects, names))
	}
	want := []string{"east-only:1:1/1[east]", "envoy:1.30:2/2[east west]", "nginx:1.27:2/4[east west]", "west-only:1:1/1[west]"}
	if !slices.Equal(usage, want) {
		t.Fatalf("image usage %v, want %v", usage, want)
	}
}

func TestQueryRecordsMarshalCanonically(t *testing.T) {
	_, s := fleet(t)
	got, err := s.Query(context.Background(), sink.RowFilter{Cluster: "east", Kind: "Service"})
	if err != nil || len(got) != 1 {
		t.Fatal(err, len(got))
	}
	var back map[string]any
	if err := json.Unmarshal(got[0].Attributes, &back); err != nil || back["team"] != "a" {
		t.Fatalf("attributes %s: %v", got[0].Attributes, err)
	}
}
