package mongodb

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
)

// fleet exports a small two-cluster fleet: deployments with images and a service.
func fleet(t *testing.T) (*mongo.Collection, *Sink) {
	t.Helper()
	ctx := context.Background()
	db := newDatabase(t)
	var east *Sink
	for _, cluster := range []string{"east", "west"} {
		s, _ := newSink(t, db, cluster)
		if cluster == "east" {
			east = s
		}
		svc := sinktest.Deployment(cluster, "apps", 3, map[string]any{"image": cluster + "-only:1", "team": "a", "labels": map[string]any{"tier": "web", "x": "y"}}).
			With(func(o *export.Origin) { o.Kind, o.Group, o.Target = "Service", "", "services" })
		rows := []export.Row{
			sinktest.Deployment(cluster, "apps", 1, map[string]any{"images": []any{"nginx:1.27", "envoy:1.30"}, "team": "a"}),
			sinktest.Deployment(cluster, "apps", 2, map[string]any{"images": []any{"nginx:1.27"}, "team": "b"}),
			svc,
		}
		if err := (&agent{sink: s, cluster: cluster, inventory: "apps"}).export(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	return collection(t, db, "rows"), east
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
		{"operators are values", sink.RowFilter{Name: "$where"}, nil},
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

func aggregate(t *testing.T, coll *mongo.Collection, pipeline bson.A) []bson.M {
	t.Helper()
	cur, err := coll.Aggregate(context.Background(), pipeline)
	if err != nil {
		t.Fatal(err)
	}
	var out []bson.M
	if err := cur.All(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFleetPipelines(t *testing.T) {
	coll, _ := fleet(t)
	var counts []string
	for _, d := range aggregate(t, coll, CountsPipeline()) {
		id := map[string]any{}
		for _, e := range d["_id"].(bson.D) {
			id[e.Key] = e.Value
		}
		counts = append(counts, fmt.Sprintf("%s/%s=%v", id["cluster"], id["kind"], d["objects"]))
	}
	if want := []string{"east/Deployment=2", "east/Service=1", "west/Deployment=2", "west/Service=1"}; !slices.Equal(counts, want) {
		t.Fatalf("counts %v, want %v", counts, want)
	}
	if got := aggregate(t, coll, LatestPipeline("west", "Deployment")); len(got) != 2 {
		t.Fatalf("latest west deployments: %d", len(got))
	}
	if got := aggregate(t, coll, LatestPipeline("", "Service")); len(got) != 2 {
		t.Fatalf("latest services: %d", len(got))
	}
	usage, err := ImageUsage(context.Background(), coll)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range usage {
		got = append(got, fmt.Sprintf("%s:%d%v", u.Image, u.Objects, u.Clusters))
	}
	want := []string{"east-only:1:1[east]", "envoy:1.30:2[east west]", "nginx:1.27:4[east west]", "west-only:1:1[west]"}
	if !slices.Equal(got, want) {
		t.Fatalf("image usage %v, want %v", got, want)
	}
}
