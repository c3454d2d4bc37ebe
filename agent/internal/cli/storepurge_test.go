package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/kafka"
	"kollect.dev/agent/internal/sink/s3"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestSinksPurgeS3 runs the command's story against versitygw: an S3 sink in the per-resource
// layout, one document per row, whose keys and ETags the test lists with its own client.
func TestSinksPurgeS3(t *testing.T) {
	srv, err := testenv.StartS3()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	cl := awss3.New(awss3.Options{Region: srv.Region, BaseEndpoint: aws.String(srv.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, "")})
	bucket := "purge-cli"
	if _, err := cl.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	// The command's credentials: the AWS SDK's default chain, here the environment.
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	listing := func(cluster string) map[string]string {
		out, err := cl.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: &bucket, Prefix: aws.String("fleet/" + cluster + "/")})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, o := range out.Contents {
			m[aws.ToString(o.Key)] = aws.ToString(o.ETag)
		}
		return m
	}
	testPurge(t, purgeFixture{
		objects: true,
		flags:   []string{"--s3", "s3://" + bucket + "/fleet", "--endpoint", srv.Endpoint, "--path-style"},
		sinkOf: func(cluster string) sink.Sink {
			s, err := s3.New(ctx, &v1alpha1.KollectSnapshotSink{Spec: v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkS3,
				S3: &v1alpha1.S3SinkConfig{Bucket: bucket, Prefix: "fleet", Endpoint: srv.Endpoint, UsePathStyle: true,
					SecretRef: &v1alpha1.SecretReference{Name: "keys"}},
				Layout: v1alpha1.Layout{Mode: v1alpha1.LayoutPerResource}}},
				sink.Env{Cluster: cluster, Namespace: "shop", Name: "bucket", Secrets: sinktest.Secrets(map[string]map[string][]byte{
					"keys": {"accessKeyID": []byte(srv.AccessKey), "secretAccessKey": []byte(srv.SecretKey)}})})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		// Documents, the coverage entries the manifests list, manifests.
		counts: func(cluster string) [3]int {
			var out [3]int
			for key := range listing(cluster) {
				if !strings.HasSuffix(key, ".manifest.json") {
					out[0]++
					continue
				}
				raw, err := cl.GetObject(ctx, &awss3.GetObjectInput{Bucket: &bucket, Key: aws.String(key)})
				if err != nil {
					t.Fatal(err)
				}
				var m struct{ Coverage []export.Coverage }
				if err := json.NewDecoder(raw.Body).Decode(&m); err != nil {
					t.Fatal(err)
				}
				raw.Body.Close()
				out[1] += len(m.Coverage)
				out[2]++
			}
			return out
		},
		fingerprint: func(cluster string) string {
			var parts []string
			for k, etag := range listing(cluster) {
				parts = append(parts, k+"@"+etag)
			}
			sort.Strings(parts)
			return strings.Join(parts, ",")
		},
	})
}

// TestSinksPurgeKafka runs it against kfake (a stand-in for Kafka), read back with kcat: the
// latest record of every key of a cluster, by its kollect-cluster header.
func TestSinksPurgeKafka(t *testing.T) {
	k, err := testenv.StartKafka(testenv.KafkaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	ctx := context.Background()
	topic := "kollect.changes"
	type rec struct {
		Partition int      `json:"partition"`
		Offset    int64    `json:"offset"`
		Key       string   `json:"key"`
		Payload   *string  `json:"payload"`
		Headers   []string `json:"headers"`
	}
	latest := func(cluster string) map[string]rec {
		out, err := exec.Command("kcat", "-C", "-b", k.Addr, "-t", topic, "-e", "-J", "-q").Output()
		if err != nil {
			t.Fatalf("kcat: %v", err)
		}
		m := map[string]rec{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var r rec
			if line == "" || json.Unmarshal([]byte(line), &r) != nil {
				continue
			}
			m[r.Key] = r // one partition per key: later offsets come later
		}
		for key, r := range m {
			mine := false
			for i := 0; i+1 < len(r.Headers); i += 2 {
				mine = mine || r.Headers[i] == "kollect-cluster" && r.Headers[i+1] == cluster
			}
			if !mine {
				delete(m, key)
			}
		}
		return m
	}
	testPurge(t, purgeFixture{
		objects: true,
		flags:   []string{"--kafka", k.Addr, "--topic", topic},
		sinkOf: func(cluster string) sink.Sink {
			s, err := kafka.New(ctx, &v1alpha1.KollectEventSink{Spec: v1alpha1.KollectEventSinkSpec{Type: v1alpha1.EventSinkKafka,
				Mode: v1alpha1.EventModeChanges, BufferSize: 1000, Timeout: metav1.Duration{Duration: 20 * time.Second},
				Kafka: &v1alpha1.KafkaSinkConfig{Brokers: []string{k.Addr}, Topic: topic, CreateTopic: true, Partitions: 3}}},
				sink.Env{Cluster: cluster, Namespace: "shop", Name: "events", Secrets: sinktest.Secrets(nil)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		// Row keys with a value, the coverage of state records, state keys with a value.
		counts: func(cluster string) [3]int {
			var out [3]int
			for key, r := range latest(cluster) {
				switch {
				case r.Payload == nil:
				case strings.HasSuffix(key, "/_state"):
					var st export.StateRecord
					if err := json.Unmarshal([]byte(*r.Payload), &st); err != nil {
						t.Fatal(err)
					}
					out[1] += len(st.Coverage)
					out[2]++
				default:
					out[0]++
				}
			}
			return out
		},
		fingerprint: func(cluster string) string {
			var parts []string
			for key, r := range latest(cluster) {
				parts = append(parts, fmt.Sprintf("%s@%d/%d", key, r.Partition, r.Offset))
			}
			sort.Strings(parts)
			return strings.Join(parts, ",")
		},
	})
}
