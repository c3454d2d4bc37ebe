package mongodb

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The fleet questions the Postgres sink answers with views, as aggregation pipelines over the
// rows collection (docs/sinks/mongodb.md shows them in shell syntax). They use only stages
// and accumulators FerretDB v1 supports as well as MongoDB.

// CountsPipeline counts objects per cluster and kind.
func CountsPipeline() bson.A {
	return bson.A{
		bson.D{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: bson.D{{Key: "cluster", Value: "$cluster"}, {Key: "api_group", Value: "$api_group"}, {Key: "kind", Value: "$kind"}}},
			// On MongoDB add {last_change: {$max: "$updated_at"}}: FerretDB v1 lacks $max in $group.
			{Key: "objects", Value: bson.D{{Key: "$sum", Value: 1}}},
		}}},
		bson.D{{Key: "$sort", Value: bson.D{{Key: "_id.cluster", Value: 1}, {Key: "_id.kind", Value: 1}, {Key: "_id.api_group", Value: 1}}}},
	}
}

// LatestPipeline lists the objects of a kind, newest change first within each object, in
// one cluster or (cluster "") all of them. An object collected by several inventories appears
// once per inventory: FerretDB v1 lacks $first, on MongoDB append
// {$group: {_id: {cluster: "$cluster", namespace: "$namespace", name: "$name"}, row: {$first: "$$ROOT"}}}
// to keep one per object as the Postgres view <table>_latest does.
func LatestPipeline(cluster, kind string) bson.A {
	match := bson.D{{Key: "kind", Value: kind}}
	if cluster != "" {
		match = append(match, bson.E{Key: "cluster", Value: cluster})
	}
	return bson.A{
		bson.D{{Key: "$match", Value: match}},
		bson.D{{Key: "$sort", Value: bson.D{{Key: "cluster", Value: 1}, {Key: "namespace", Value: 1}, {Key: "name", Value: 1},
			{Key: "updated_at", Value: -1}}}},
		bson.D{{Key: "$project", Value: bson.D{{Key: "_id", Value: 0}, {Key: "digest", Value: 0}}}},
	}
}

// ImageUsagePipeline is the image question as one aggregation for MongoDB. FerretDB v1 lacks
// $concatArrays and $addToSet (and mangles $unwind of dotted paths), so ImageUsage does not
// run it and counts from a projection instead; docs/sinks/mongodb.md shows it for MongoDB.
func ImageUsagePipeline() bson.A {
	return bson.A{
		bson.D{{Key: "$project", Value: bson.D{{Key: "cluster", Value: 1}, {Key: "image", Value: bson.D{{Key: "$concatArrays", Value: bson.A{
			bson.D{{Key: "$cond", Value: bson.A{bson.D{{Key: "$isArray", Value: "$attributes.images"}}, "$attributes.images", bson.A{}}}},
			bson.D{{Key: "$cond", Value: bson.A{bson.D{{Key: "$eq", Value: bson.A{bson.D{{Key: "$type", Value: "$attributes.image"}}, "string"}}}, bson.A{"$attributes.image"}, bson.A{}}}},
		}}}}}}},
		bson.D{{Key: "$unwind", Value: "$image"}},
		bson.D{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: "$image"},
			{Key: "objects", Value: bson.D{{Key: "$sum", Value: 1}}},
			{Key: "clusters", Value: bson.D{{Key: "$addToSet", Value: "$cluster"}}},
		}}},
		bson.D{{Key: "$sort", Value: bson.D{{Key: "_id", Value: 1}}}},
	}
}

// ImageCount is one container image in use across the fleet.
type ImageCount struct {
	Image    string
	Objects  int
	Clusters []string
}

// ImageUsage answers "which images run where" over the rows collection: every image named by
// an "images" or "image" attribute, with the clusters running it and the number of objects.
func ImageUsage(ctx context.Context, coll *mongo.Collection) ([]ImageCount, error) {
	cur, err := coll.Find(ctx, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "attributes.images", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "attributes.image", Value: bson.D{{Key: "$exists", Value: true}}}},
	}}}, options.Find().SetProjection(bson.D{{Key: "cluster", Value: 1}, {Key: "attributes.images", Value: 1}, {Key: "attributes.image", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("reading images: %w", err)
	}
	defer cur.Close(ctx)
	byImage := map[string]*ImageCount{}
	for cur.Next(ctx) {
		var d struct {
			Cluster    string `bson:"cluster"`
			Attributes struct {
				Images any `bson:"images"`
				Image  any `bson:"image"`
			} `bson:"attributes"`
		}
		if err := cur.Decode(&d); err != nil {
			return nil, fmt.Errorf("reading images: %w", err)
		}
		var images []string
		if list, ok := d.Attributes.Images.(bson.A); ok {
			for _, v := range list {
				if s, ok := v.(string); ok {
					images = append(images, s)
				}
			}
		}
		if s, ok := d.Attributes.Image.(string); ok {
			images = append(images, s)
		}
		slices.Sort(images)
		for _, img := range slices.Compact(images) {
			c := byImage[img]
			if c == nil {
				c = &ImageCount{Image: img}
				byImage[img] = c
			}
			c.Objects++
			if !slices.Contains(c.Clusters, d.Cluster) {
				c.Clusters = append(c.Clusters, d.Cluster)
			}
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("reading images: %w", err)
	}
	out := make([]ImageCount, 0, len(byImage))
	for _, c := range byImage {
		slices.Sort(c.Clusters)
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b ImageCount) int { return strings.Compare(a.Image, b.Image) })
	return out, nil
}
