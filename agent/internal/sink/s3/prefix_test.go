package s3

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// The bucket and prefix the "One writer per cluster" policy of docs/sinks/s3.md names.
const (
	recipeBucket = "fleet-inventory"
	recipePrefix = "kollect/"
)

// recipePolicy returns the bucket policy of the "One writer per cluster" section of
// docs/sinks/s3.md: the test applies the page as written.
func recipePolicy(t *testing.T) string {
	t.Helper()
	section := string(sinktest.DocFile(t, "sinks/s3.md"))
	start := strings.Index(section, "## One writer per cluster\n")
	if start < 0 {
		t.Fatal(`docs/sinks/s3.md has no section "One writer per cluster"`)
	}
	section = section[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 1 {
		t.Fatalf("the section has %d json blocks, want the policy alone", len(blocks))
	}
	return blocks[0][1]
}

// clientAs is a raw S3 client of srv with the credentials access/secret.
func clientAs(srv *testenv.S3, access, secret string) *s3.Client {
	return s3.New(s3.Options{Region: srv.Region, BaseEndpoint: aws.String(srv.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(access, secret, "")})
}

// userSink is the sink an agent of cluster uses with user's credentials (secret user-secret).
func userSink(t *testing.T, srv *testenv.S3, bucket, cluster, user string) *Sink {
	t.Helper()
	spec := &v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkS3,
		S3: &v1alpha1.S3SinkConfig{Bucket: bucket, Prefix: recipePrefix, Endpoint: srv.Endpoint, UsePathStyle: true,
			SecretRef: &v1alpha1.SecretReference{Name: user}},
		Serialization: v1alpha1.Serialization{Format: "json"}, Layout: v1alpha1.Layout{Mode: v1alpha1.LayoutByNamespace}}
	secret := map[string][]byte{KeyAccessKeyID: []byte(user), KeySecretAccessKey: []byte(user + "-secret")}
	env := sink.Env{Cluster: cluster, Namespace: "kollect", Name: "bucket", CacheDir: t.TempDir(), Log: logr.Discard(),
		Secrets: sinktest.Secrets(map[string]map[string][]byte{user: secret})}
	s, err := open(context.Background(), spec, env)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// storedObject is what the administrator's listing shows of one object.
type storedObject struct {
	key, etag string
	size      int64
}

// listing is the administrator's view of every object under prefix.
func listing(t *testing.T, admin *s3.Client, bucket, prefix string) []storedObject {
	t.Helper()
	var out []storedObject
	p := s3.NewListObjectsV2Paginator(admin, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			out = append(out, storedObject{aws.ToString(o.Key), aws.ToString(o.ETag), aws.ToInt64(o.Size)})
		}
	}
	return out
}

// denied reports whether err is the store's AccessDenied.
func denied(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "AccessDenied"
}

// TestPrefixPolicyOneWriterPerCluster applies the bucket policy of docs/sinks/s3.md ("One
// writer per cluster") to versitygw with users east and west: each exports its cluster with
// the real sink; east's credentials configured as cluster west are refused, terminally, by the
// probe and the export; raw writes and deletes with east's credentials on west's keys are
// refused; and the administrator's listing of west's directory is the same before and after.
// Widening east's grant to the whole bucket then lets the same raw write through: the
// refusals are the policy's, not the gateway's defaults.
func TestPrefixPolicyOneWriterPerCluster(t *testing.T) {
	ctx := context.Background()
	srv, err := testenv.StartS3With(testenv.S3Options{Users: map[string]string{"east": "east-secret", "west": "west-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	admin := clientAs(srv, srv.AccessKey, srv.SecretKey)
	if _, err := admin.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(recipeBucket)}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String(recipeBucket), Policy: aws.String(recipePolicy(t))}); err != nil {
		t.Fatalf("the documented policy: %v", err)
	}

	// Each cluster with its own credentials: probe, a first export (which lists its leftovers),
	// and for east a second one that prunes a namespace (DeleteObjects) and its holdings.
	for _, cluster := range []string{"east", "west"} {
		s := userSink(t, srv, recipeBucket, cluster, cluster)
		if err := s.Probe(ctx); err != nil {
			t.Fatalf("%s probe: %v", cluster, err)
		}
		e := &exporter{sink: s}
		e.export(t, row(t, cluster, "shop", "web", 3), row(t, cluster, "ops", "probe", 1))
		if cluster == "east" {
			if st := e.export(t, row(t, cluster, "shop", "web", 4)); st.Written != 1 || st.Deleted != 1 {
				t.Fatalf("east's second export: %+v", st)
			}
			if hs, err := s.Holdings(ctx, "east", ""); err != nil || len(hs) != 1 || hs[0].Objects != 1 {
				t.Fatalf("east's holdings: %+v, %v", hs, err)
			}
		}
	}
	westDir := recipePrefix + "west/"
	before := listing(t, admin, recipeBucket, westDir)
	if len(before) != 3 {
		t.Fatalf("west's objects: %+v", before)
	}

	// east's credentials in an agent named west: refused at the first request, terminally.
	wrong := userSink(t, srv, recipeBucket, "west", "east")
	if err := wrong.Probe(ctx); sink.ClassOf(err) != sink.Terminal || !strings.Contains(err.Error(), "AccessDenied") {
		t.Errorf("probe of east's credentials as west: want a terminal AccessDenied, got %v", err)
	}
	err = wrong.Export(ctx, (&exporter{sink: wrong}).batch(row(t, "west", "shop", "web", 9)))
	if sink.ClassOf(err) != sink.Terminal || !strings.Contains(err.Error(), "AccessDenied") ||
		!strings.Contains(err.Error(), westDir+"workloads.manifest.json") {
		t.Errorf("export of east's credentials as west: want a terminal AccessDenied naming west's manifest, got %v", err)
	}
	t.Logf("the refused export: %v", err)

	// Raw calls with east's credentials on west's keys.
	east := clientAs(srv, "east", "east-secret")
	manifest := westDir + "workloads.manifest.json"
	refused := map[string]error{}
	_, refused["put over west's manifest"] = east.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(recipeBucket), Key: aws.String(manifest), Body: strings.NewReader("{}")})
	_, refused["put a new key of west's"] = east.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(recipeBucket), Key: aws.String(westDir + "workloads/intruder.json"), Body: strings.NewReader("{}")})
	_, refused["delete west's manifest"] = east.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(recipeBucket), Key: aws.String(manifest)})
	_, refused["read west's manifest"] = east.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(recipeBucket), Key: aws.String(manifest)})
	_, refused["list west's directory"] = east.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(recipeBucket), Prefix: aws.String(westDir)})
	_, refused["list the whole prefix"] = east.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(recipeBucket), Prefix: aws.String(recipePrefix)})
	for what, err := range refused {
		if !denied(err) {
			t.Errorf("east: %s: want AccessDenied, got %v", what, err)
		}
	}
	// DeleteObjects answers per key: every one of west's must be refused.
	ids := make([]types.ObjectIdentifier, len(before))
	for i, o := range before {
		ids[i] = types.ObjectIdentifier{Key: aws.String(o.key)}
	}
	out, err := east.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(recipeBucket), Delete: &types.Delete{Objects: ids}})
	if err == nil && (len(out.Deleted) != 0 || len(out.Errors) != len(ids)) {
		t.Errorf("east's DeleteObjects of west's keys: deleted %d, refused %d of %d", len(out.Deleted), len(out.Errors), len(ids))
	}
	if err == nil {
		for _, e := range out.Errors {
			if aws.ToString(e.Code) != "AccessDenied" {
				t.Errorf("east's DeleteObjects of %s: %s %s", aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message))
			}
		}
	} else if !denied(err) {
		t.Errorf("east's DeleteObjects of west's keys: %v", err)
	}

	// Nothing of west's changed: the requests above were answered, so their effects are in.
	after := listing(t, admin, recipeBucket, westDir)
	if len(after) != len(before) {
		t.Fatalf("west's objects before %+v, after %+v", before, after)
	}
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("west's object changed: before %+v, after %+v", before[i], after[i])
		}
	}

	// Control: east granted the whole bucket writes west's key.
	wide := `{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "east"},
		"Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], "Resource": "arn:aws:s3:::` + recipeBucket + `/*"}]}`
	if _, err := admin.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String(recipeBucket), Policy: aws.String(wide)}); err != nil {
		t.Fatal(err)
	}
	if _, err := east.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(recipeBucket), Key: aws.String(westDir + "workloads/intruder.json"), Body: strings.NewReader("{}")}); err != nil {
		t.Errorf("east with a bucket-wide grant still refused: the refusals above are not the recipe's: %v", err)
	}
}

// TestRefusedReadOfMissingManifest stands in for AWS's 403 (not 404) to a read of a missing key
// by a caller whose s3:ListBucket does not cover it: versitygw answers 403 for a missing key
// when s3:GetObject is not granted, so the policy grants east everything in its directory but
// that. The first export finds the manifest missing by listing and writes; the second, whose
// manifest exists, stops at the refused read, terminally.
func TestRefusedReadOfMissingManifest(t *testing.T) {
	ctx := context.Background()
	srv, err := testenv.StartS3With(testenv.S3Options{Users: map[string]string{"east": "east-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	admin := clientAs(srv, srv.AccessKey, srv.SecretKey)
	if _, err := admin.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(recipeBucket)}); err != nil {
		t.Fatal(err)
	}
	policy := `{"Version": "2012-10-17", "Statement": [
		{"Effect": "Allow", "Principal": {"AWS": "east"}, "Action": ["s3:PutObject", "s3:DeleteObject"],
		 "Resource": "arn:aws:s3:::fleet-inventory/kollect/east/*"},
		{"Effect": "Allow", "Principal": {"AWS": "east"}, "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::fleet-inventory",
		 "Condition": {"StringLike": {"s3:prefix": "kollect/east/*"}}}]}`
	if _, err := admin.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String(recipeBucket), Policy: aws.String(policy)}); err != nil {
		t.Fatal(err)
	}
	s := userSink(t, srv, recipeBucket, "east", "east")
	e := &exporter{sink: s}
	if err := s.Export(ctx, e.batch(row(t, "east", "shop", "web", 1))); err != nil {
		t.Fatalf("first export, its manifest's read refused: %v", err)
	}
	if err := s.Export(ctx, e.batch(row(t, "east", "shop", "web", 2))); sink.ClassOf(err) != sink.Terminal || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("second export, an existing manifest's read refused: want a terminal AccessDenied, got %v", err)
	}
}
