package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestAmbientCredentialsNeedAClusterScope: an S3 sink without secretRef would sign with the
// agent's own identity (here AWS_* variables of the agent's process, as IRSA or an instance
// role would be in a cloud). It is refused, by name of the rule, and writes nothing until a
// KollectClusterScope selecting its namespace allows ambient credentials; withdrawn, the
// running sink stops again.
func TestAmbientCredentialsNeedAClusterScope(t *testing.T) {
	srv, err := testenv.StartS3()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	ctx := context.Background()
	s3c := s3.New(s3.Options{Region: srv.Region, BaseEndpoint: aws.String(srv.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, "")})
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("ambient")}); err != nil {
		t.Fatal(err)
	}
	keys := func() string {
		out, err := s3c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("ambient")})
		if err != nil {
			return err.Error()
		}
		var ks []string
		for _, o := range out.Contents {
			ks = append(ks, aws.ToString(o.Key))
		}
		return strings.Join(ks, " ")
	}

	ns := "ambient-creds"
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kollect.dev/sinks": "shared"}}})
	bucket := &kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bucket"}, Spec: kollectv1.KollectSnapshotSinkSpec{
		Type: kollectv1.SnapshotSinkS3, S3: &kollectv1.S3SinkConfig{Bucket: "ambient", Region: srv.Region, Endpoint: srv.Endpoint, UsePathStyle: true},
		Serialization: kollectv1.Serialization{Format: kollectv1.FormatJSON}}}
	create(t, bucket)
	create(t, colorInventory(ns, kollectv1.SinkReferences{Snapshot: []kollectv1.LocalObjectReference{{Name: "bucket"}}})...)
	create(t, configMap(ns, "a", map[string]string{"color": "red"}))
	startAgentWith(t, nil, "c-ambient", ns, nil)

	refused := "spec.s3.secretRef unset: the sink would authenticate as the agent itself, and no KollectClusterScope with allowAmbientCredentials selects the namespace"
	scopeCondition(t, bucket, func() []metav1.Condition { return bucket.Status.Conditions }, kollectv1.ConditionReady, metav1.ConditionFalse,
		kollectv1.ReasonScopeCredentialsDenied, refused)
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
	eventually(t, 20*time.Second, "the inventory names the refused sink", func() (bool, string) {
		_ = cp.Client.Get(ctx, client.ObjectKeyFromObject(inv), inv)
		for _, c := range inv.Status.Conditions {
			if strings.Contains(c.Message, refused) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", inv.Status.Conditions)
	})
	if k := keys(); k != "" {
		t.Fatalf("the refused sink wrote %s", k)
	}

	// The platform grants the agent's identity to the sinks of this namespace.
	platform := &kollectv1.KollectClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "ambient-platform"}, Spec: kollectv1.KollectClusterScopeSpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kollect.dev/sinks": "shared"}},
		KollectScopeSpec: kollectv1.KollectScopeSpec{AllowedKinds: []kollectv1.GroupKindRule{{Group: "*", Kind: "*"}},
			AllowedNamespaces: []string{"*"}, AllowedSinks: []kollectv1.SinkRule{{Family: "*"}}},
		AllowAmbientCredentials: true}}
	create(t, platform)
	eventually(t, 90*time.Second, "rows signed with the agent's identity", func() (bool, string) {
		k := keys()
		return strings.Contains(k, "manifest.json"), k
	})

	// Withdrawn: the running sink is stopped, not left signing as the agent.
	if err := cp.Client.Delete(ctx, platform); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the inventory refuses the sink again", func() (bool, string) {
		_ = cp.Client.Get(ctx, client.ObjectKeyFromObject(inv), inv)
		for _, c := range inv.Status.Conditions {
			if strings.Contains(c.Message, refused) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", inv.Status.Conditions)
	})
}
