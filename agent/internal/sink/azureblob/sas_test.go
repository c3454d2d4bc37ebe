package azureblob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/go-logr/logr"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// recipePermissions returns the --permissions of the generate-sas line of "One writer per
// cluster" in docs/sinks/azureblob.md: the test signs what the page tells users to sign.
func recipePermissions(t *testing.T) string {
	t.Helper()
	section := string(sinktest.DocFile(t, "sinks/azureblob.md"))
	start := strings.Index(section, "## One writer per cluster\n")
	if start < 0 {
		t.Fatal(`docs/sinks/azureblob.md has no section "One writer per cluster"`)
	}
	section = section[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	m := regexp.MustCompile(`az storage container generate-sas [^\n]*\\\n\s+--permissions ([a-z]+) `).FindStringSubmatch(section)
	if m == nil {
		t.Fatal("the section has no `az storage container generate-sas … --permissions …` line")
	}
	return m[1]
}

// oneWriter is the story of "One writer per cluster": containers PREFIX-east and PREFIX-west
// made by the administrator (the account key), and each cluster's Secret holding the
// signature the administrator gave it.
type oneWriter struct {
	t        *testing.T
	template string // PREFIX-{cluster}
	admin    *container.SharedKeyCredential
	secrets  map[string]string // cluster: the sasToken of its Secret
}

// newOneWriter creates the two containers as the administrator and gives west a container
// signature for its own container; east's signature is the caller's (eastSAS).
func newOneWriter(t *testing.T, prefix string, eastSAS func(w *oneWriter) string) *oneWriter {
	t.Helper()
	key, err := container.NewSharedKeyCredential(server.Account, server.Key)
	if err != nil {
		t.Fatal(err)
	}
	w := &oneWriter{t: t, template: prefix + "-" + ClusterPlaceholder, admin: key}
	for _, c := range []string{"east", "west"} {
		if _, err := w.adminClient(w.name(c)).Create(t.Context(), nil); err != nil {
			t.Fatalf("creating %s as the administrator: %v", w.name(c), err)
		}
	}
	w.secrets = map[string]string{"west": w.containerSAS(t, w.name("west")), "east": eastSAS(w)}
	return w
}

// name is the container of cluster.
func (w *oneWriter) name(cluster string) string {
	return strings.ReplaceAll(w.template, ClusterPlaceholder, cluster)
}

func (w *oneWriter) adminClient(name string) *container.Client {
	w.t.Helper()
	c, err := container.NewClientWithSharedKeyCredential(server.Endpoint+"/"+name, w.admin, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

// containerSAS is what `az storage container generate-sas` mints: a service signature for the
// container name alone (sr=c), signed with the account key, with the documented permissions.
func (w *oneWriter) containerSAS(t *testing.T, name string) string {
	t.Helper()
	q, err := sas.BlobSignatureValues{Protocol: sas.ProtocolHTTPSandHTTP, StartTime: time.Now().Add(-5 * time.Minute),
		ExpiryTime: time.Now().Add(time.Hour), Permissions: recipePermissions(t), ContainerName: name}.SignWithSharedKey(w.admin)
	if err != nil {
		t.Fatal(err)
	}
	if enc := q.Encode(); strings.Contains(enc, "sr=c") {
		return enc
	}
	t.Fatalf("the signature for %s is not a container signature: %s", name, q.Encode())
	return ""
}

// sink is the sink of an agent of cluster holding the Secret of secretOf, as the agent opens
// it: container template, prefix fleet/.
func (w *oneWriter) sink(secretOf, cluster string) *Sink {
	w.t.Helper()
	sp := &v1alpha1.KollectSnapshotSinkSpec{Type: v1alpha1.SnapshotSinkAzureBlob,
		AzureBlob: &v1alpha1.AzureBlobSinkConfig{Account: server.Account, Container: w.template, Prefix: "fleet/", Endpoint: server.Endpoint,
			SecretRef: v1alpha1.SecretReference{Name: "azure-blob-sas"}},
		Serialization: v1alpha1.Serialization{Format: "ndjson"}, Layout: v1alpha1.Layout{Mode: v1alpha1.LayoutByNamespace}}
	s, err := open(w.t.Context(), sp, sink.Env{Cluster: cluster, Namespace: "kollect", Name: "azure", Log: logr.Discard(),
		Secrets: sinktest.Secrets(map[string]map[string][]byte{"azure-blob-sas": {KeySASToken: []byte("?" + w.secrets[secretOf])}})})
	if err != nil {
		w.t.Fatal(err)
	}
	if want := server.Endpoint + "/" + w.name(cluster); s.url != want {
		w.t.Fatalf("the sink of cluster %s writes %s, want %s", cluster, s.url, want)
	}
	return s
}

// listing is the administrator's view of a container: every blob's name, ETag and size.
func (w *oneWriter) listing(name string) string {
	w.t.Helper()
	var out []string
	p := w.adminClient(name).NewListBlobsFlatPager(nil)
	for p.More() {
		page, err := p.NextPage(w.t.Context())
		if err != nil {
			w.t.Fatalf("listing %s as the administrator: %v", name, err)
		}
		for _, b := range page.Segment.BlobItems {
			out = append(out, fmt.Sprintf("%s@%s:%d", *b.Name, *b.Properties.ETag, *b.Properties.ContentLength))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func clusterRows(cluster string, n int) *export.Snapshot {
	rows := make([]export.Row, n)
	for i := range rows {
		rows[i] = export.Row{Origin: &export.Origin{Cluster: cluster, Inventory: "workloads", Target: "deploys", Group: "apps", Version: "v1", Kind: "Deployment"},
			Namespace: "shop", Name: fmt.Sprintf("web-%d", i), UID: fmt.Sprintf("%s-%d", cluster, i)}
	}
	return export.NewSnapshot(rows)
}

// exportAll exports as east and as west, each with its own Secret and cluster name, and checks
// the writer check reads the cluster's container: a second agent naming itself west is refused.
func (w *oneWriter) exportAll(ctx context.Context) {
	t := w.t
	for _, c := range []string{"east", "west"} {
		s := w.sink(c, c)
		if err := s.Probe(ctx); err != nil {
			t.Fatalf("probe as %s: %v", c, err)
		}
		ex := sinktest.Exporter{Cluster: c, Inventory: "workloads", Writer: export.Writer{Version: "v1", Instance: "kollect@" + c + "-uid"}}
		if err := ex.Export(ctx, s, clusterRows(c, 3)); err != nil {
			t.Fatalf("export as %s: %v", c, err)
		}
		held, err := s.Holdings(ctx, c, "")
		if err != nil || len(held) != 1 || held[0].Writer.Instance != "kollect@"+c+"-uid" {
			t.Fatalf("holdings of %s in %s: %+v, %v; want one inventory written by kollect@%s-uid", c, w.name(c), held, err, c)
		}
		if l := w.listing(w.name(c)); !strings.Contains(l, "fleet/"+c+"/workloads.manifest.json@") || strings.Count(l, "fleet/"+c+"/") != strings.Count(l, "\n")+1 {
			t.Fatalf("%s holds other than %s's blobs:\n%s", w.name(c), c, l)
		}
	}
	second := sinktest.Exporter{Cluster: "west", Inventory: "workloads", Writer: export.Writer{Version: "v1", Instance: "kollect@other-uid"}}
	if err := second.Export(ctx, w.sink("west", "west"), clusterRows("west", 1)); !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("a second agent named west exporting to %s: %v, want the writer conflict", w.name("west"), err)
	}
}

// refusedCode is the service's refusal of a signature where it is not valid: Azurite answers
// AuthorizationFailure, Azure AuthenticationFailed (the container is signed into it).
func refusedCode(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == 403 &&
		(bloberror.HasCode(err, bloberror.AuthorizationFailure) || bloberror.HasCode(err, bloberror.AuthenticationFailed))
}

// crossWrites runs, after both clusters exported, what east's signature must not be able to do
// to west's container, and returns what got through: the real sink of an agent of cluster west
// holding east's Secret (probe, export, purge), and raw azblob calls with east's signature. The
// evidence is the service's: the administrator's listing of west's container before and after.
func (w *oneWriter) crossWrites(ctx context.Context) []string {
	t := w.t
	var through []string
	west := w.name("west")
	before := w.listing(west)

	mixed := w.sink("east", "west") // east's Secret, cluster name west: container PREFIX-west
	if err := mixed.Probe(ctx); err == nil {
		through = append(through, "the probe with east's Secret as cluster west passed")
	} else if !refusedCode(err) {
		t.Fatalf("probe with east's Secret as cluster west: %v, want a 403 refusal of the signature", err)
	}
	ex := sinktest.Exporter{Cluster: "west", Inventory: "workloads", Writer: export.Writer{Version: "v1", Instance: "kollect@east-uid"}}
	err := ex.Export(ctx, mixed, clusterRows("west", 2))
	switch {
	case err == nil:
		through = append(through, "the export with east's Secret as cluster west succeeded")
	case !refusedCode(err) || sink.ClassOf(err) != sink.Terminal || !strings.Contains(err.Error(), "/"+west+"/") ||
		!strings.Contains(err.Error(), "check that the Secret is this cluster's"):
		// A writer conflict, say, is the sink's refusal, after the service let it in.
		through = append(through, fmt.Sprintf("the service let east's export as cluster west in: %v (%s)", err, sink.ClassOf(err)))
	default:
		t.Logf("export refused (%s): %v", sink.ClassOf(err), err)
	}

	raw, err := container.NewClientWithNoCredential(server.Endpoint+"/"+west+"?"+w.secrets["east"], nil)
	if err != nil {
		t.Fatal(err)
	}
	var victim string // a document of west's, as the administrator listed it
	for _, line := range strings.Split(before, "\n") {
		if name, _, _ := strings.Cut(line, "@"); !strings.HasSuffix(name, ".manifest.json") {
			victim = name
			break
		}
	}
	attempts := []struct {
		what string
		do   func() error
	}{
		{"a raw list of " + west, func() error {
			_, err := raw.NewListBlobsFlatPager(nil).NextPage(ctx)
			return err
		}},
		{"a raw upload of a new blob to " + west, func() error {
			_, err := raw.NewBlockBlobClient("fleet/west/forged.ndjson").Upload(ctx, streaming.NopCloser(bytes.NewReader([]byte("{}\n"))), nil)
			return err
		}},
		{"a raw overwrite of west's manifest", func() error {
			_, err := raw.NewBlockBlobClient("fleet/west/workloads.manifest.json").Upload(ctx, streaming.NopCloser(bytes.NewReader([]byte("{}"))), nil)
			return err
		}},
		{"a raw delete of " + victim, func() error {
			_, err := raw.NewBlobClient(victim).Delete(ctx, nil)
			return err
		}},
		{"a purge of west with east's Secret", func() error {
			_, err := mixed.Purge(ctx, "west", "", time.Now())
			return err
		}},
	}
	for _, a := range attempts {
		switch err := a.do(); {
		case err == nil:
			through = append(through, a.what+" succeeded")
		case !refusedCode(err):
			t.Fatalf("%s: %v, want a 403 refusal of the signature", a.what, err)
		}
	}

	if after := w.listing(west); after != before {
		through = append(through, fmt.Sprintf("%s changed:\n%s\nbecame\n%s", west, before, after))
	}
	return through
}

// TestSASOneWriterPerCluster: with a container per cluster (container kollect-{cluster}) and a
// container signature per cluster in each cluster's Secret, both clusters export, and east's
// signature cannot touch west's container, neither through the sink (an agent started with
// cluster name west and east's Secret: 403, terminal, with the hint) nor with raw azblob calls;
// west's listing, read by the administrator, does not change. Against Azurite, a stand-in.
func TestSASOneWriterPerCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	w := newOneWriter(t, "kollect", func(w *oneWriter) string { return w.containerSAS(t, w.name("east")) })
	w.exportAll(ctx)
	if through := w.crossWrites(ctx); len(through) > 0 {
		t.Fatalf("east's signature reached west's container:\n%s", strings.Join(through, "\n"))
	}
	// The refusal is about the container, not the signature: east still writes its own.
	ex := sinktest.Exporter{Cluster: "east", Inventory: "workloads", Writer: export.Writer{Version: "v1", Instance: "kollect@east-uid"}}
	if err := ex.Export(ctx, w.sink("east", "east"), clusterRows("east", 4)); err != nil {
		t.Fatalf("east exporting to its own container afterwards: %v", err)
	}
}

// TestSASWideGrantIsCaught runs the same checks with an account signature (every container)
// in east's Secret: each of them must report the cross-cluster access, so
// TestSASOneWriterPerCluster passing means the signatures were refused, not that the checks
// were blind.
func TestSASWideGrantIsCaught(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	w := newOneWriter(t, "wide", func(*oneWriter) string { return server.AccountSAS(recipePermissions(t)) })
	w.exportAll(ctx)
	through := w.crossWrites(ctx)
	t.Logf("with an account signature in east's Secret:\n%s", strings.Join(through, "\n"))
	if len(through) != 8 {
		t.Fatalf("with an account signature in east's Secret the checks caught %d of 8 cross-cluster accesses: %v", len(through), through)
	}
}
