package s3

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
)

// etags maps every key of the bucket to its ETag, as the server reports them.
func etags(t *testing.T, bucket string) map[string]string {
	t.Helper()
	out, err := client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, o := range out.Contents {
		m[aws.ToString(o.Key)] = aws.ToString(o.ETag)
	}
	return m
}

// TestObjectStoreContract runs the object stores' shared contract (writer check and
// takeover, confirmation, writer naming, coverage) against versitygw (a stand-in for S3), the
// objects' ETags showing what was written.
func TestObjectStoreContract(t *testing.T) {
	sinktest.ObjectStoreContract(t, func(t *testing.T) sinktest.ObjectStore {
		bucket := newBucket(t)
		return sinktest.ObjectStore{
			Open: func(cluster string, ser v1alpha1.Serialization, mode v1alpha1.LayoutMode) sinktest.ObjectSink {
				return newSink(t, cluster, bucket, ser, mode, nil)
			},
			Prefix:   "fleet/",
			Versions: func() map[string]string { return etags(t, bucket) },
			Read:     func(name string) []byte { return get(t, bucket, name) },
		}
	})
}
