package backends

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/egress"
	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// egressCase is a sink of one type whose every endpoint is host:port.
func egressCase(typ, host, port string) sink.Object {
	meta := metav1.ObjectMeta{Namespace: "team-a", Name: "s"}
	secret := &kollectv1.SecretReference{Name: "creds"}
	hp := net.JoinHostPort(host, port)
	var portNum int32
	_, _ = fmt.Sscan(port, &portNum)
	switch typ {
	case "snapshot/git":
		return &kollectv1.KollectSnapshotSink{ObjectMeta: meta, Spec: kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkGit,
			Git: &kollectv1.GitSinkConfig{URL: "http://" + hp + "/repo.git"}}}
	case "snapshot/gitlab":
		return &kollectv1.KollectSnapshotSink{ObjectMeta: meta, Spec: kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkGitLab,
			GitLab: &kollectv1.GitLabSinkConfig{GitSinkConfig: kollectv1.GitSinkConfig{URL: "http://" + hp + "/g/p.git", SecretRef: secret},
				BaseURL: "http://" + hp, Project: "g/p"}}}
	case "snapshot/s3":
		return &kollectv1.KollectSnapshotSink{ObjectMeta: meta, Spec: kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkS3,
			S3: &kollectv1.S3SinkConfig{Bucket: "b", Endpoint: "http://" + hp, UsePathStyle: true, SecretRef: secret}}}
	case "snapshot/gcs":
		return &kollectv1.KollectSnapshotSink{ObjectMeta: meta, Spec: kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkGCS,
			GCS: &kollectv1.GCSSinkConfig{Bucket: "b", Endpoint: "http://" + hp}}}
	case "snapshot/azureblob":
		return &kollectv1.KollectSnapshotSink{ObjectMeta: meta, Spec: kollectv1.KollectSnapshotSinkSpec{Type: kollectv1.SnapshotSinkAzureBlob,
			AzureBlob: &kollectv1.AzureBlobSinkConfig{Account: "a", Container: "ccc", Endpoint: "http://" + hp + "/a", SecretRef: *secret}}}
	case "database/postgres":
		return &kollectv1.KollectDatabaseSink{ObjectMeta: meta, Spec: kollectv1.KollectDatabaseSinkSpec{Type: kollectv1.DatabaseSinkPostgres,
			Postgres: &kollectv1.PostgresSinkConfig{Host: host, Port: portNum, Database: "inventory", SecretRef: *secret}}}
	case "database/mongodb":
		return &kollectv1.KollectDatabaseSink{ObjectMeta: meta, Spec: kollectv1.KollectDatabaseSinkSpec{Type: kollectv1.DatabaseSinkMongoDB,
			MongoDB: &kollectv1.MongoDBSinkConfig{URI: "mongodb://" + hp + "/?directConnection=true", Database: "inventory"}}}
	case "database/bigquery":
		return &kollectv1.KollectDatabaseSink{ObjectMeta: meta, Spec: kollectv1.KollectDatabaseSinkSpec{Type: kollectv1.DatabaseSinkBigQuery,
			BigQuery: &kollectv1.BigQuerySinkConfig{Project: "p", Dataset: "d", Endpoint: "http://" + hp}}}
	case "event/kafka":
		return &kollectv1.KollectEventSink{ObjectMeta: meta, Spec: kollectv1.KollectEventSinkSpec{Type: kollectv1.EventSinkKafka,
			Kafka: &kollectv1.KafkaSinkConfig{Brokers: []string{hp}, Topic: "t"}}}
	case "event/nats":
		return &kollectv1.KollectEventSink{ObjectMeta: meta, Spec: kollectv1.KollectEventSinkSpec{Type: kollectv1.EventSinkNATS,
			NATS: &kollectv1.NATSSinkConfig{Servers: []string{"nats://" + hp}, Stream: "s"}}}
	}
	return nil
}

// TestEgressRefusedByEverySinkClient: every sink type of the agent's table, built as the
// agent builds it with local destinations not allowed, is refused by the egress guard —
// through its own client library (pgx, the MongoDB driver, franz-go, nats.go, go-git, the
// AWS SDK, the Google Cloud clients, net/http for GitLab) — whether the endpoint is a literal
// loopback address (refused before any dial), the name localhost (resolved, then refused as
// each connection is made) or the cloud metadata address (refused always), and when a scope's
// allowedDestinations leave the destination out, by address range (before the dial for a
// literal, after resolution for a name) or by host pattern. A loopback listener counts the
// connections that reached it: none.
func TestEgressRefusedByEverySinkClient(t *testing.T) {
	addr, accepted := testenv.CountingListener(t)
	_, port, _ := net.SplitHostPort(addr)
	strict := egress.New(egress.Policy{})
	secrets := func(context.Context, string) (map[string][]byte, error) {
		return map[string][]byte{"username": []byte("u"), "password": []byte("p"), "token": []byte("t"),
			"accessKeyID": []byte("a"), "secretAccessKey": []byte("s"), "sasToken": []byte("sv=2021-08-06&sig=x"), "access_key_id": []byte("a"), "secret_access_key": []byte("s")}, nil
	}
	types := slices.Sorted(func(yield func(string) bool) {
		for k := range Factories(nil) {
			if !yield(k) {
				return
			}
		}
	})
	// A scope's allowedDestinations narrow a guard that allows local destinations.
	local := egress.New(egress.Policy{AllowLocal: true})
	byAddress := egress.Allowlist{Source: "KollectClusterScope platform", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	byName := egress.Allowlist{Source: "KollectScope team-a/limits", Hosts: []string{"*.corp.example"}}
	for _, typ := range types {
		for _, dest := range []struct {
			name, host, rule string
			guard            *egress.Guard
		}{
			{"loopback", "127.0.0.1", egress.RuleLoopback, strict},
			{"localhost", "localhost", egress.RuleLoopback, strict},
			{"metadata", "169.254.169.254", egress.RuleLinkLocal, strict},
			{"scope-cidrs-address", "127.0.0.1", byAddress.Rule(), local.Restrict(byAddress)},
			{"scope-cidrs-resolved", "localhost", byAddress.Rule(), local.Restrict(byAddress)},
			{"scope-hosts", "localhost", byName.Rule(), local.Restrict(byName)},
		} {
			strict := dest.guard
			t.Run(typ+"/"+dest.name, func(t *testing.T) {
				obj := egressCase(typ, dest.host, port)
				if obj == nil {
					t.Fatalf("no egress case for sink type %s: add one", typ)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				env := sink.Env{Cluster: "c1", Namespace: "team-a", Name: "s", Secrets: secrets, CacheDir: t.TempDir(),
					Log: logr.Discard(), Egress: strict}
				s, err := Factories(nil)[typ](ctx, obj, env)
				if err == nil {
					err = s.Probe(ctx)
					_ = s.Close()
				}
				if err == nil || !strings.Contains(err.Error(), "egress refused") || !strings.Contains(err.Error(), dest.rule) {
					t.Fatalf("got %v, want an egress refusal naming %q", err, dest.rule)
				}
				var refused *egress.RefusedError
				if !errors.As(err, &refused) && !strings.Contains(err.Error(), "egress refused for") {
					t.Errorf("the refusal is not an egress error: %v", err)
				}
			})
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the loopback listener accepted %d connections from sinks the guard refused", n)
	}
}
