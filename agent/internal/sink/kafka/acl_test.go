package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// The one-writer-per-cluster recipe of docs/sinks/kafka.md, against kfake (franz-go's Kafka
// stand-in, through kfakesrv -acl-user) with ACLs enforced: a topic per cluster
// (kollect.{cluster}.rows) and, per cluster user, WRITE, READ and DESCRIBE on its own topic,
// created by the superuser with CreateACLs as kafka-acls.sh would. The sink needs nothing
// else: no consumer group (it reads partitions directly), no transactional id; the
// idempotent producer's InitProducerId is allowed by WRITE on a topic (KIP-679; kfake and
// Kafka 3.0+ alike).

const templ = "kollect.{cluster}.rows"

// aclBroker is kfakesrv with SASL, the superuser admin and one user per name in users (the
// password is the name with "-pw"), no ACL granted yet.
func aclBroker(t *testing.T, users ...string) *testenv.Kafka {
	t.Helper()
	bin, err := testenv.ServerBinary("kfakesrv")
	if err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kollect-kafka-acl-")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-port", strconv.Itoa(port), "-data-dir", filepath.Join(dir, "data"), "-user", "admin", "-pass", "admin-pw"}
	for _, u := range users {
		args = append(args, "-acl-user", u+":"+u+"-pw")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := testenv.StartProcess("kfakesrv", dir, bin, args, nil, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return &testenv.Kafka{Process: p, Addr: addr}
}

// clusterRows is a snapshot of n rows stamped with cluster, as that cluster's agent exports.
func clusterRows(cluster string, n int) *export.Snapshot {
	rows := make([]export.Row, n)
	for i := range rows {
		rows[i] = row(fmt.Sprintf("%s-%d", cluster, i), i)
		rows[i].Origin.Cluster = cluster
	}
	return export.NewSnapshot(rows)
}

// oneWriter is the scenario: a sink per cluster, each with its own credentials.
type oneWriter struct {
	t     *testing.T
	k     *testenv.Kafka
	env   func(secret, cluster string) sink.Env
	admin *kadm.Client
}

func newOneWriter(t *testing.T) *oneWriter {
	k := aclBroker(t, "east", "west")
	secrets := map[string]map[string][]byte{}
	for _, u := range []string{"admin", "east", "west"} {
		secrets[u] = map[string][]byte{"username": []byte(u), "password": []byte(u + "-pw")}
	}
	w := &oneWriter{t: t, k: k, env: func(secret, cluster string) sink.Env {
		return sink.Env{Cluster: cluster, Namespace: "kollect", Name: "events", Secrets: sinktest.Secrets(secrets)}
	}}
	w.admin = w.sink("admin", "admin").admin
	return w
}

// sink is the real sink an agent of cluster builds from a KollectEventSink whose secretRef
// names secret, with the topic template.
func (w *oneWriter) sink(secret, cluster string) *Sink {
	sp := spec(w.k.Addr, templ)
	sp.Kafka.CreateTopic = false
	sp.Kafka.SASLMechanism = v1alpha1.SASLMechanism("SCRAM-SHA-512")
	sp.Kafka.SecretRef = &v1alpha1.SecretReference{Name: secret}
	return newSink(w.t, sp, w.env(secret, cluster))
}

// setup creates both topics and grants each user its own topic; eastPattern widens east's
// grant in TestACLWideGrantIsCaught.
func (w *oneWriter) setup(ctx context.Context, eastTopic string, eastPattern kadm.ACLPattern) {
	t := w.t
	compact := "compact"
	for _, topic := range []string{"kollect.east.rows", "kollect.west.rows"} {
		if _, err := w.admin.CreateTopic(ctx, 3, -1, map[string]*string{"cleanup.policy": &compact}, topic); err != nil {
			t.Fatalf("creating %s: %v", topic, err)
		}
	}
	grant := func(user, topic string, pattern kadm.ACLPattern) {
		b := kadm.NewACLs().Allow("User:"+user).AllowHosts("*").Topics(topic).ResourcePatternType(pattern).
			Operations(kadm.OpWrite, kadm.OpRead, kadm.OpDescribe)
		res, err := w.admin.CreateACLs(ctx, b)
		if err != nil {
			t.Fatalf("granting %s %s: %v", user, topic, err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("granting %s %s %s: %v %s", user, r.Operation, topic, r.Err, r.ErrMessage)
			}
		}
	}
	grant("east", eastTopic, eastPattern)
	grant("west", "kollect.west.rows", kadm.ACLPatternLiteral)
}

// endOffsets reads a topic's end offsets as the superuser: what the broker holds, not what
// a client believes it sent.
func (w *oneWriter) endOffsets(ctx context.Context, topic string) map[int32]int64 {
	w.t.Helper()
	offs, err := w.admin.ListEndOffsets(ctx, topic)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		w.t.Fatalf("end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// rawProduce produces one record as user straight to topic with franz-go, no sink involved:
// a forged row of cluster west.
func (w *oneWriter) rawProduce(ctx context.Context, user, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.k.Addr), kgo.SASL(scram.Auth{User: user, Pass: user + "-pw"}.AsSha512Mechanism()),
		kgo.RecordDeliveryTimeout(15*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	r := &kgo.Record{Topic: topic, Key: []byte("west/pods/pods/forged"), Value: []byte(`{"type":"upsert"}`),
		Headers: []kgo.RecordHeader{{Key: hCluster, Value: []byte("west")}, {Key: hEvent, Value: []byte("upsert")}}}
	return cl.ProduceSync(ctx, r).FirstErr()
}

// crossWrites runs, after both clusters exported, what east's credentials must not be able
// to do to west's topic, and returns what got through: an export of the real sink as an agent
// of cluster west holding east's Secret, and raw produces as east. The evidence is the
// broker's: west's end offsets, read by the superuser before and after.
func (w *oneWriter) crossWrites(ctx context.Context) []string {
	t := w.t
	var through []string
	before := w.endOffsets(ctx, "kollect.west.rows")

	mixed := w.sink("east", "west") // east's Secret, cluster name west: topic kollect.west.rows
	if mixed.topic != "kollect.west.rows" {
		t.Fatalf("the sink of cluster west writes %s", mixed.topic)
	}
	ex := exporter{Cluster: "west", Writer: export.Writer{Version: "v1", Instance: "kollect@east-uid"}}
	err := ex.Export(ctx, mixed, clusterRows("west", 2))
	switch {
	case err == nil:
		through = append(through, "the export with east's credentials as cluster west succeeded")
	case !errors.Is(err, kerr.TopicAuthorizationFailed) || sink.ClassOf(err) != sink.Terminal ||
		!strings.Contains(err.Error(), "kollect.west.rows"):
		// A writer conflict, say, is the sink's refusal, after the broker let it in.
		through = append(through, fmt.Sprintf("the broker let east's export as cluster west in: %v (%s)", err, sink.ClassOf(err)))
	default:
		t.Logf("export refused (%s): %v", sink.ClassOf(err), err)
	}
	if err := mixed.Probe(ctx); err == nil {
		through = append(through, "the probe with east's credentials as cluster west passed")
	}
	err = w.rawProduce(ctx, "east", "kollect.west.rows")
	switch {
	case err == nil:
		through = append(through, "a raw produce as east to kollect.west.rows was acknowledged")
	case !errors.Is(err, kerr.TopicAuthorizationFailed):
		t.Fatalf("raw produce as east to kollect.west.rows: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}

	after := w.endOffsets(ctx, "kollect.west.rows")
	if fmt.Sprint(after) != fmt.Sprint(before) {
		through = append(through, fmt.Sprintf("kollect.west.rows end offsets moved from %v to %v", before, after))
	}
	return through
}

// exportAll exports as east and as west, each with its own credentials and cluster name,
// and checks the writer check still reads the per-cluster topic: a second instance naming
// itself west is refused as a second writer.
func (w *oneWriter) exportAll(ctx context.Context) {
	t := w.t
	for _, c := range []string{"east", "west"} {
		sk := w.sink(c, c)
		if sk.topic != "kollect."+c+".rows" {
			t.Fatalf("the sink of cluster %s writes %s", c, sk.topic)
		}
		if err := sk.Probe(ctx); err != nil {
			t.Fatalf("probe as %s: %v", c, err)
		}
		ex := exporter{Cluster: c, Writer: export.Writer{Version: "v1", Instance: "kollect@" + c + "-uid"}}
		if err := ex.Export(ctx, sk, clusterRows(c, 3)); err != nil {
			t.Fatalf("export as %s: %v", c, err)
		}
		held, err := sk.Holdings(ctx, c, "")
		if err != nil || len(held) != 1 || held[0].Rows != 3 || held[0].Writer.Instance != "kollect@"+c+"-uid" {
			t.Fatalf("holdings of %s in its topic: %+v, %v; want 3 rows written by kollect@%s-uid", c, held, err, c)
		}
	}
	second := exporter{Cluster: "west", Writer: export.Writer{Version: "v1", Instance: "kollect@other-uid"}}
	if err := second.Export(ctx, w.sink("west", "west"), clusterRows("west", 1)); !errors.Is(err, sink.ErrWriterConflict) {
		t.Fatalf("a second agent named west exporting to kollect.west.rows: %v, want the writer conflict", err)
	}
	for _, c := range []string{"east", "west"} {
		total := int64(0)
		for _, o := range w.endOffsets(ctx, "kollect."+c+".rows") {
			total += o
		}
		if total == 0 {
			t.Fatalf("kollect.%s.rows is empty after %s's export", c, c)
		}
	}
}

// TestACLOneWriterPerCluster: with a topic per cluster and ACLs granting each cluster's user
// its own topic only, both clusters export, and east's credentials cannot write west's topic,
// neither through the sink (an agent started with cluster name west and east's Secret:
// TOPIC_AUTHORIZATION_FAILED, terminal) nor with a raw producer; west's end offsets, read by
// the superuser, do not move.
func TestACLOneWriterPerCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	w := newOneWriter(t)
	w.setup(ctx, "kollect.east.rows", kadm.ACLPatternLiteral)
	w.exportAll(ctx)
	if through := w.crossWrites(ctx); len(through) > 0 {
		t.Fatalf("east's credentials reached west's topic:\n%s", strings.Join(through, "\n"))
	}
	// The refusal is about the topic, not the user: east still writes its own.
	if err := w.rawProduce(ctx, "east", "kollect.east.rows"); err != nil {
		t.Fatalf("raw produce as east to its own topic: %v", err)
	}
}

// TestACLWideGrantIsCaught runs the same checks with east granted every topic (the literal
// wildcard, as `kafka-acls.sh --topic '*'`): each of them must report the cross-cluster write,
// so TestACLOneWriterPerCluster passing means the ACLs refused, not that the checks were blind.
func TestACLWideGrantIsCaught(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	w := newOneWriter(t)
	w.setup(ctx, "*", kadm.ACLPatternLiteral)
	w.exportAll(ctx)
	through := w.crossWrites(ctx)
	t.Logf("with east granted every topic:\n%s", strings.Join(through, "\n"))
	if len(through) != 4 {
		t.Fatalf("with east granted every topic the checks caught %d of 4 cross-cluster writes: %v", len(through), through)
	}
}
