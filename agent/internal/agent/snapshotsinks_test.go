package agent

import (
	"context"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/sink/backends"
	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

func gitOut(t *testing.T, repo string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"--git-dir", repo}, args...)...).CombinedOutput()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// TestGitSinkThroughTheAgent: the real agent exports to a bare repository, one file per
// object; a change is one commit touching only that object's file; static data commits
// nothing; a deleted object's file is pruned.
func TestGitSinkThroughTheAgent(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "git-e2e")
	repo, err := testenv.InitBareRepo(filepath.Join(t.TempDir(), "inv.git"))
	if err != nil {
		t.Fatal(err)
	}
	create(t, &kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo"}, Spec: kollectv1.KollectSnapshotSinkSpec{
		Type: kollectv1.SnapshotSinkGit, Git: &kollectv1.GitSinkConfig{URL: "file://" + repo, Branch: "main"},
		Layout: kollectv1.Layout{Mode: kollectv1.LayoutPerResource}}})
	create(t, colorInventory(ns, kollectv1.SinkReferences{Snapshot: []kollectv1.LocalObjectReference{{Name: "repo"}}})...)
	create(t, configMap(ns, "a", map[string]string{"color": "red"}), configMap(ns, "b", map[string]string{"color": "blue"}))
	calls := &callCounter{}
	startAgentWith(t, nil, "c-git", ns, calls.wrap(backends.Factories(prometheus.NewRegistry())))

	files := func() string { return gitOut(t, repo, "ls-tree", "-r", "--name-only", "main") }
	eventually(t, 60*time.Second, "one file per object", func() (bool, string) {
		f := files()
		return strings.Contains(f, "/a.yaml") && strings.Contains(f, "/b.yaml"), f
	})
	commits := func() int { return len(strings.Split(gitOut(t, repo, "rev-list", "main"), "\n")) }
	first := commits()

	ctx := context.Background()
	cm := configMap(ns, "a", map[string]string{"color": "green"})
	if err := cp.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a commit for the change", func() (bool, string) { return commits() == first+1, files() })
	// The change's commit holds a.yaml and the inventory's writer file (who wrote it last,
	// rewritten with every commit that changes data; docs/sinks/git.md).
	changed := gitOut(t, repo, "diff", "--name-only", "main~1", "main")
	for _, f := range strings.Split(changed, "\n") {
		if !strings.HasSuffix(f, "/a.yaml") && !strings.HasSuffix(f, ".writer.json") {
			t.Fatalf("the change touched %q, want only a.yaml and the writer file", changed)
		}
	}
	if !strings.Contains(changed, "/a.yaml") {
		t.Fatalf("the change's commit touched %q, not a.yaml", changed)
	}
	// Static data: no commit between the change's commit and the return of a sink call for a
	// resync asked after it (the repository's commit count is the evidence; the call shows
	// the agent did reach the sink in the window).
	awaitResync(t, client.ObjectKey{Namespace: ns, Name: "inv"}, calls.Resyncs)
	if n := commits(); n != first+1 {
		t.Fatalf("%d commits while data was static (%d export calls)", n-first-1, calls.Calls())
	}
	if err := cp.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "b.yaml pruned", func() (bool, string) {
		f := files()
		return !strings.Contains(f, "/b.yaml") && strings.Contains(f, "/a.yaml"), f
	})
	if merges := gitOut(t, repo, "rev-list", "--merges", "main"); merges != "" {
		t.Fatalf("history has merge commits: %s", merges)
	}
}

// TestS3SinkThroughTheAgent: the real agent writes one object per row and a manifest to an
// S3-compatible server, and prunes the object of a deleted row.
func TestS3SinkThroughTheAgent(t *testing.T) {
	t.Parallel()
	srv, err := testenv.StartS3()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	client := s3.New(s3.Options{Region: srv.Region, BaseEndpoint: aws.String(srv.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, "")})
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("fleet")}); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, "s3-e2e")
	create(t,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3"},
			StringData: map[string]string{"accessKeyID": srv.AccessKey, "secretAccessKey": srv.SecretKey}},
		&kollectv1.KollectSnapshotSink{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bucket"}, Spec: kollectv1.KollectSnapshotSinkSpec{
			Type: kollectv1.SnapshotSinkS3, S3: &kollectv1.S3SinkConfig{Bucket: "fleet", Region: srv.Region, Endpoint: srv.Endpoint,
				UsePathStyle: true, SecretRef: &kollectv1.SecretReference{Name: "s3"}},
			Serialization: kollectv1.Serialization{Format: kollectv1.FormatJSON, Compression: kollectv1.CompressionGzip},
			Layout:        kollectv1.Layout{Mode: kollectv1.LayoutPerResource}}})
	create(t, colorInventory(ns, kollectv1.SinkReferences{Snapshot: []kollectv1.LocalObjectReference{{Name: "bucket"}}})...)
	create(t, configMap(ns, "a", map[string]string{"color": "red"}), configMap(ns, "b", map[string]string{"color": "blue"}))
	startAgentWith(t, nil, "c-s3", ns, nil)

	keys := func() string {
		out, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("fleet")})
		if err != nil {
			return err.Error()
		}
		var ks []string
		for _, o := range out.Contents {
			ks = append(ks, aws.ToString(o.Key))
		}
		sort.Strings(ks)
		return strings.Join(ks, " ")
	}
	eventually(t, 60*time.Second, "objects and manifest", func() (bool, string) {
		k := keys()
		return strings.Contains(k, "/a.json.gz") && strings.Contains(k, "/b.json.gz") && strings.Contains(k, "manifest.json"), k
	})
	if err := cp.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "b pruned", func() (bool, string) {
		k := keys()
		return !strings.Contains(k, "/b.json") && strings.Contains(k, "/a.json.gz"), k
	})
}
