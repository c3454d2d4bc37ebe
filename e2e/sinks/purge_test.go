package sinks

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestKollectSinksPurgeThroughTheShippedBinary: the shipped kollect-agent exports cluster east
// to S3 (versitygw), Azure Blob Storage (Azurite) and Kafka (kfake), stand-ins all three; once
// the agent is stopped, the shipped `kollect sinks purge` reports what each holds (--dry-run
// removes nothing), refuses while the agent's last write is recent, and with --force removes
// it: s3cmd lists no key of east any more, curl lists no blob of east (west's planted blob
// keeps its ETag), and kcat reads a tombstone as the last record of every key of east, its
// state record's included. No report shows a credential.
func TestKollectSinksPurgeThroughTheShippedBinary(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var (
		cp *testenv.ControlPlane
		s3 *testenv.S3
		az *testenv.Azurite
		k  *testenv.Kafka
	)
	must(t, parallel(controlPlane(t, "purge", &cp),
		func() (err error) {
			if s3, err = testenv.StartS3(); err == nil {
				t.Cleanup(s3.Stop)
			}
			return err
		},
		func() (err error) {
			if az, err = testenv.StartAzurite(); err == nil {
				t.Cleanup(az.Stop)
			}
			return err
		},
		func() (err error) {
			if k, err = testenv.StartKafka(testenv.KafkaOptions{}); err == nil {
				t.Cleanup(k.Stop)
			}
			return err
		}))
	s3c, err := newS3cmd(t.TempDir(), s3)
	must(t, err)
	_, err = s3c.run(ctx, "mb", "s3://"+s3Bucket)
	must(t, err)
	must(t, az.CreateContainer(azContainer))
	// Another cluster's blob, which the purge of east must leave as it is.
	westBlob := "inv/west/" + inventory + "/default.ndjson"
	if st, body, _, err := az.Do("PUT", "/"+azContainer+"/"+westBlob, strings.NewReader("{}\n"), http.Header{"X-Ms-Blob-Type": {"BlockBlob"}}); err != nil || st != http.StatusCreated {
		t.Fatalf("planting west's blob: %d %s %v", st, body, err)
	}
	azr := &azureReader{endpoint: az.Endpoint, container: azContainer, sas: az.AccountSAS("rl")}
	blobs := func(prefix string) map[string]string {
		list, err := azr.list(ctx)
		must(t, err)
		out := map[string]string{}
		for _, b := range list {
			if strings.HasPrefix(b.Name, prefix) {
				out[b.Name] = b.Properties.ETag
			}
		}
		return out
	}
	westBefore := blobs("inv/west/")
	c := cp.Client
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sinkNS}}))
	must(t, seedWorkloads(ctx, c))
	must(t, applyYAML(ctx, c, kollectConfig))
	must(t, applyYAML(ctx, c, kafkaSink(k).manifest))
	must(t, applyYAML(ctx, c, `
apiVersion: v1
kind: Secret
metadata: {name: s3-keys, namespace: kollect-sinks}
stringData: {accessKeyID: `+s3.AccessKey+`, secretAccessKey: `+s3.SecretKey+`}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectSnapshotSink
metadata: {name: s3, namespace: kollect-sinks}
spec:
  type: s3
  s3: {bucket: `+s3Bucket+`, prefix: inv/, endpoint: "`+s3.Endpoint+`", usePathStyle: true, secretRef: {name: s3-keys}}`+snapshotSpec))
	must(t, applyYAML(ctx, c, azureBlobSink(az, azr).manifest))
	must(t, c.Create(ctx, newInventory(kollectv1.ClusterSinkReferences{
		Snapshot: []kollectv1.NamespacedObjectReference{{Name: "s3", Namespace: sinkNS}, {Name: "azureblob", Namespace: sinkNS}},
		Event:    []kollectv1.NamespacedObjectReference{{Name: "kafka", Namespace: sinkNS}}})))
	a := newAgent(t, cp)
	a.start()

	eastKeys := func() []string {
		keys, err := s3c.keys(ctx)
		must(t, err)
		var out []string
		for _, key := range keys {
			if strings.HasPrefix(key, "inv/"+cluster+"/") {
				out = append(out, key)
			}
		}
		return out
	}
	kr := &kafkaReader{addr: k.Addr}
	// lastOfEast is the last record of each key of east, by its kollect-cluster header.
	lastOfEast := func() map[string]kcatRecord {
		recs, err := kr.records(ctx)
		if err != nil && strings.Contains(err.Error(), "Unknown topic") {
			return nil // the agent has not created it yet
		}
		must(t, err)
		out := map[string]kcatRecord{}
		for _, r := range recs {
			for i := 0; i+1 < len(r.Headers); i += 2 {
				if r.Headers[i] == "kollect-cluster" && r.Headers[i+1] == cluster {
					out[*r.Key] = r
				}
			}
		}
		return out
	}
	azManifest := "inv/" + cluster + "/" + inventory + ".manifest.json"
	eventuallyT(t, 90*time.Second, "east's manifest in S3 and Azure Blob and its state record in Kafka", func() (bool, string) {
		keys := eastKeys()
		manifest := false
		for _, key := range keys {
			manifest = manifest || strings.HasSuffix(key, ".manifest.json")
		}
		_, blob := blobs("inv/" + cluster + "/")[azManifest]
		_, state := lastOfEast()[cluster+"/"+inventory+"/_state"]
		return manifest && blob && state, strings.Join(keys, ",")
	})
	a.stop()

	// The operator's shared access signature: read, delete and list are what a purge needs.
	purgeSAS := az.AccountSAS("rdl")
	dir := t.TempDir()
	built, err := testenv.BuildCommands(dir, "", "./agent/cmd/kollect")
	must(t, err)
	kollect := func(args ...string) (string, int) {
		cmd := exec.CommandContext(ctx, built[0], append([]string{"sinks", "purge", "--cluster", cluster}, args...)...)
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s3.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3.SecretKey,
			"AZURE_STORAGE_SAS_TOKEN="+purgeSAS)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	s3Flags := []string{"--s3", "s3://" + s3Bucket + "/inv", "--endpoint", s3.Endpoint, "--path-style"}
	azureFlags := []string{"--azureblob", az.Account + "/" + azContainer + "/inv", "--endpoint", az.Endpoint}
	kafkaFlags := []string{"--kafka", k.Addr, "--topic", kafkaTopic}
	before, keysBefore, blobsBefore := len(lastOfEast()), eastKeys(), blobs("inv/"+cluster+"/")
	sig, _ := url.ParseQuery(purgeSAS)
	for _, flags := range [][]string{s3Flags, azureFlags, kafkaFlags} {
		out, code := kollect(append(flags, "--dry-run")...)
		if code != 0 || !strings.Contains(out, "OBJECTS") || !strings.Contains(out, "dry run: nothing removed; a purge would be refused") {
			t.Fatalf("dry run %v: exit %d\n%s", flags, code, out)
		}
		if strings.Contains(out, s3.SecretKey) || strings.Contains(out, sig.Get("sig")) {
			t.Fatalf("the report shows a credential:\n%s", out)
		}
		if out, code := kollect(flags...); code != 1 || !strings.Contains(out, "refusing to purge cluster east") {
			t.Fatalf("purge of a cluster written just now %v: exit %d, want 1\n%s", flags, code, out)
		}
	}
	if got := eastKeys(); strings.Join(got, ",") != strings.Join(keysBefore, ",") || len(lastOfEast()) != before {
		t.Fatalf("a dry run or refusal removed something: keys %v", got)
	}
	if got := blobs("inv/" + cluster + "/"); !maps.Equal(got, blobsBefore) || len(got) < 2 {
		t.Fatalf("a dry run or refusal changed east's blobs: %v -> %v", blobsBefore, got)
	}
	for _, flags := range [][]string{s3Flags, azureFlags, kafkaFlags} {
		if out, code := kollect(append(flags, "--force")...); code != 0 || !strings.Contains(out, "removed ") {
			t.Fatalf("forced purge %v: exit %d\n%s", flags, code, out)
		}
	}
	if got := eastKeys(); len(got) != 0 {
		t.Fatalf("s3cmd still lists keys of east after the purge: %v", got)
	}
	if got := blobs("inv/" + cluster + "/"); len(got) != 0 {
		t.Fatalf("curl still lists blobs of east after the purge: %v", got)
	}
	if got := blobs("inv/west/"); !maps.Equal(got, westBefore) || len(got) != 1 {
		t.Fatalf("the purge of east touched west's blob: %v -> %v", westBefore, got)
	}
	last := lastOfEast()
	if _, ok := last[cluster+"/"+inventory+"/_state"]; !ok || len(last) != before {
		t.Fatalf("kcat reads %d keys of east, %d before, state key present %v", len(last), before, ok)
	}
	for key, r := range last {
		if r.Payload != nil {
			t.Fatalf("key %s of east does not end in a tombstone: %s", key, *r.Payload)
		}
	}
}
