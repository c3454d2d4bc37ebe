package nats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// The names the recipe of docs/sinks/nats.md ("One writer per cluster") is written for.
const (
	recipeStream = "KOLLECT"
	recipeBucket = "kollect-rows"
)

// recipe returns the server configuration block and the admin's setup commands of the "One
// writer per cluster" section of docs/sinks/nats.md: the test runs the page as written.
func recipe(t *testing.T) (conf, setup string) {
	t.Helper()
	raw, err := os.ReadFile("../../../../docs/sinks/nats.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(raw)
	start := strings.Index(section, "## One writer per cluster\n")
	if start < 0 {
		t.Fatal(`docs/sinks/nats.md has no section "One writer per cluster"`)
	}
	section = section[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	confs := regexp.MustCompile("(?s)```conf\n(.*?)```").FindAllStringSubmatch(section, -1)
	shs := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(confs) != 1 || len(shs) != 1 {
		t.Fatalf("the section has %d conf and %d sh blocks, want one of each", len(confs), len(shs))
	}
	return confs[0][1], shs[0][1]
}

// recipeSpec is a sink on the recipe's stream and bucket with user's credentials; it may not
// create the stream, as the recipe says.
func recipeSpec(url, user string) (*v1alpha1.KollectEventSinkSpec, map[string][]byte) {
	sp := &v1alpha1.KollectEventSinkSpec{Type: v1alpha1.EventSinkNATS, Mode: v1alpha1.EventModeChanges,
		BufferSize: 100_000, Timeout: metav1.Duration{Duration: time.Minute},
		NATS: &v1alpha1.NATSSinkConfig{Servers: []string{url}, Stream: recipeStream, KVBucket: recipeBucket,
			SecretRef: &v1alpha1.SecretReference{Name: user}}}
	return sp, map[string][]byte{"user": []byte(user), "password": []byte(user + "-secret")}
}

// userSink opens a sink with user's credentials for an agent of cluster.
func userSink(t *testing.T, url, user, cluster string) *Sink {
	t.Helper()
	sp, secret := recipeSpec(url, user)
	env := sink.Env{Cluster: cluster, Namespace: "kollect", Name: "events",
		Secrets: sinktest.Secrets(map[string]map[string][]byte{user: secret})}
	return newSink(t, sp, env)
}

// violations collects the permissions violations the server reports to a raw connection.
type violations chan error

// connectAs opens a raw nats.go connection as user.
func connectAs(t *testing.T, url, user string) (*nats.Conn, jetstream.JetStream, violations) {
	t.Helper()
	v := make(violations, 64)
	nc, err := nats.Connect(url, nats.UserInfo(user, user+"-secret"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case v <- err:
			default:
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, v
}

// refused runs op and waits for the server's permissions violation for a publish to subject;
// op, cancelled then, must fail. No timeout is the evidence: the violation is.
func (v violations) refused(t *testing.T, what, subject string, op func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- op(ctx) }()
	want := fmt.Sprintf("Publish to %q", subject)
	var opErr error
	finished := false
	for {
		select {
		case err := <-v:
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: a violation for another subject: %v", what, err)
			}
			cancel()
			if !finished {
				opErr = <-done
			}
			if opErr == nil {
				t.Fatalf("%s succeeded", what)
			}
			return
		case opErr = <-done:
			// Failed already; the violation is the evidence that the server refused it.
			if opErr == nil {
				t.Fatalf("%s succeeded: the server did not refuse %s", what, subject)
			}
			finished, done = true, nil
		case <-ctx.Done():
			t.Fatalf("%s: no permissions violation for %s within 30s (%v)", what, subject, opErr)
		}
	}
}

// serverState is what the admin reads of the stream and the bucket: counts, last sequences
// and the revision of each of west's keys.
type serverState struct {
	msgs, lastSeq, kvMsgs, kvLastSeq uint64
	westRevisions                    map[string]uint64
}

func readServerState(t *testing.T, js jetstream.JetStream) serverState {
	t.Helper()
	ctx := t.Context()
	var out serverState
	for _, name := range []string{recipeStream, "KV_" + recipeBucket} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if name == recipeStream {
			out.msgs, out.lastSeq = info.State.Msgs, info.State.LastSeq
		} else {
			out.kvMsgs, out.kvLastSeq = info.State.Msgs, info.State.LastSeq
		}
	}
	kv, err := js.KeyValue(ctx, recipeBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeysFiltered(ctx, "west.>")
	if err != nil {
		t.Fatal(err)
	}
	out.westRevisions = map[string]uint64{}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		out.westRevisions[key] = e.Revision()
	}
	return out
}

func (a serverState) String() string {
	return fmt.Sprintf("stream %d msgs, last %d; bucket %d msgs, last %d; west's key revisions %v",
		a.msgs, a.lastSeq, a.kvMsgs, a.kvLastSeq, a.westRevisions)
}

// TestPermissionsOneWriterPerCluster runs the recipe of docs/sinks/nats.md: nats-server with
// its users, the stream and bucket created by its admin commands. east and west export, probe
// and confirm with their own users; east's credentials configured as cluster west are refused
// at once (terminal), and raw publishes, bucket writes and purges as east on west's subjects
// and keys are refused; the admin reads the same stream and bucket state before and after.
func TestPermissionsOneWriterPerCluster(t *testing.T) {
	conf, setup := recipe(t)
	srv, err := testenv.StartNATS(testenv.NATSOptions{Config: conf})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cli, err := testenv.ServerBinary("nats")
	if err != nil {
		t.Fatal(err)
	}
	sinktest.Shell(t, t.TempDir(), []string{"NATS_URL=" + srv.URL, "NATS_USER=admin", "NATS_PASSWORD=admin-secret",
		"PATH=" + filepath.Dir(cli) + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + t.TempDir()}, setup)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	// Each cluster's agent with its own user: probe, export, a restarted agent's full export
	// (the inventory's last message, a direct get; the bucket read back, a consumer on its
	// keys), holdings and a confirmation.
	exporters := map[string]*sinktest.Exporter{}
	for _, cl := range []string{"east", "west"} {
		sk := userSink(t, srv.URL, cl, cl)
		if err := sk.Probe(ctx); err != nil {
			t.Fatalf("%s: probe: %v", cl, err)
		}
		ex := &sinktest.Exporter{Cluster: cl, Inventory: "pods", Writer: export.Writer{Version: "v0.1.0", Instance: "kollect@" + cl + "-uid"}}
		if err := ex.Export(ctx, sk, export.NewSnapshot(sinktest.Deployments(cl, "pods", 3, 1))); err != nil {
			t.Fatalf("%s: export: %v", cl, err)
		}
		restarted := userSink(t, srv.URL, cl, cl)
		ex.Accepted = nil
		if err := ex.Export(ctx, restarted, export.NewSnapshot(sinktest.Deployments(cl, "pods", 2, 1))); err != nil {
			t.Fatalf("%s: full export after a restart: %v", cl, err)
		}
		held, err := restarted.Holdings(ctx, cl, "")
		if err != nil {
			t.Fatalf("%s: holdings: %v", cl, err)
		}
		if len(held) != 1 || held[0].Rows != 2 {
			t.Fatalf("%s: holdings %+v, want pods with 2 rows", cl, held)
		}
		if err := restarted.Confirm(ctx, sink.Confirmation{Cluster: cl, Inventory: "pods", Checksum: ex.Accepted.Checksum,
			Writer: ex.Writer, At: time.Unix(1_800_000_100, 0), ConflictWindow: time.Hour}); err != nil {
			t.Fatalf("%s: confirm: %v", cl, err)
		}
		exporters[cl] = ex
	}

	_, adminJS, _ := connectAs(t, srv.URL, "admin")
	before := readServerState(t, adminJS)
	if len(before.westRevisions) != 2 {
		t.Fatalf("the bucket holds %d keys of west, want 2", len(before.westRevisions))
	}

	// east's credentials, the agent configured as cluster west.
	wrong := userSink(t, srv.URL, "east", "west")
	if err := wrong.Probe(ctx); err != nil {
		t.Fatalf("probe (reads only) with east's credentials as west: %v", err)
	}
	// Its first request on west's subjects, the read of the inventory's state before the
	// writer check (a direct get by subject), is refused: for an inventory west holds and for
	// one it does not. Refused at once, not when the export's minute is up.
	terminalViolation := func(what string, err error, subject string) {
		t.Helper()
		if !errors.Is(err, nats.ErrPermissionViolation) || sink.ClassOf(err) != sink.Terminal ||
			!strings.Contains(err.Error(), fmt.Sprintf("Publish to %q", subject)) {
			t.Fatalf("%s with east's credentials as west: %v (class %s), want a terminal permissions violation on %s",
				what, err, sink.ClassOf(err), subject)
		}
	}
	for _, inv := range []string{"pods", "apps"} {
		misconfigured := &sinktest.Exporter{Cluster: "west", Inventory: inv, Writer: export.Writer{Version: "v0.1.0", Instance: "kollect@east-uid"}}
		start := time.Now()
		err := misconfigured.Export(ctx, wrong, export.NewSnapshot(sinktest.Deployments("west", inv, 2, 2)))
		terminalViolation("export of "+inv, err, "$JS.API.DIRECT.GET.KOLLECT.kollect.west."+inv+"._state")
		t.Logf("export of west/%s refused in %s: %v", inv, time.Since(start).Round(time.Millisecond), err)
		if pending := wrong.BufferStats().Pending; pending != 0 {
			t.Fatalf("export of %s: %d events buffered, want none (refused before buffering)", inv, pending)
		}
	}
	err = wrong.Confirm(ctx, sink.Confirmation{Cluster: "west", Inventory: "pods", Checksum: exporters["west"].Accepted.Checksum,
		Writer: export.Writer{Version: "v0.1.0", Instance: "kollect@east-uid"}, At: time.Unix(1_800_000_200, 0), ConflictWindow: time.Hour})
	terminalViolation("confirmation of pods", err, "$JS.API.DIRECT.GET.KOLLECT.kollect.west.pods._state")
	// Past the reads (a template without {kind} keeps no state, hence no writer check; a
	// batch with a baseline reads nothing back), the events themselves are refused: the
	// batch's first publish.
	sp, secret := recipeSpec(srv.URL, "east")
	sp.NATS.SubjectTemplate, sp.NATS.KVBucket = "kollect.{cluster}.{inventory}.rows", ""
	blind := newSink(t, sp, sink.Env{Cluster: "west", Namespace: "kollect", Name: "events",
		Secrets: sinktest.Secrets(map[string]map[string][]byte{"east": secret})})
	start := time.Now()
	err = (&sinktest.Exporter{Cluster: "west", Inventory: "apps", Accepted: export.NewSnapshot(nil)}).Export(ctx, blind,
		export.NewSnapshot(sinktest.Deployments("west", "apps", 2, 2)))
	terminalViolation("export without reads", err, "kollect.west.apps.rows")
	// Without a baseline the sink reads back what the stream holds of west first: refused.
	// A sink of its own: the server reports a refused publish asynchronously, and on the
	// previous step's connection that report can arrive during this step's read.
	rereader := newSink(t, sp, sink.Env{Cluster: "west", Namespace: "kollect", Name: "events",
		Secrets: sinktest.Secrets(map[string]map[string][]byte{"east": secret})})
	err = (&sinktest.Exporter{Cluster: "west", Inventory: "apps"}).Export(ctx, rereader, export.NewSnapshot(sinktest.Deployments("west", "apps", 2, 2)))
	terminalViolation("read-back", err, "$JS.API.DIRECT.GET.KOLLECT.kollect.west.apps.rows")
	t.Logf("events refused in %s: %v", time.Since(start).Round(time.Millisecond), err)
	if _, err := wrong.Purge(ctx, "west", "", time.Time{}); !errors.Is(err, nats.ErrPermissionViolation) || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("purge of west with east's credentials: %v, want a terminal permissions violation", err)
	}

	// Raw nats.go as east, on west's subjects and keys, and on the stream and bucket.
	_, eastJS, v := connectAs(t, srv.URL, "east")
	westKey := ""
	for key := range before.westRevisions {
		westKey = key
		break
	}
	eastKV, err := eastJS.KeyValue(ctx, recipeBucket)
	if err != nil {
		t.Fatal(err)
	}
	v.refused(t, "publish on west's subject", "kollect.west.pods.Deployment", func(ctx context.Context) error {
		_, err := eastJS.Publish(ctx, "kollect.west.pods.Deployment", []byte(`{}`))
		return err
	})
	v.refused(t, "put of west's key", "$KV."+recipeBucket+"."+westKey, func(ctx context.Context) error {
		_, err := eastKV.Put(ctx, westKey, []byte(`{}`))
		return err
	})
	v.refused(t, "delete of west's key", "$KV."+recipeBucket+"."+westKey, func(ctx context.Context) error {
		return eastKV.Delete(ctx, westKey)
	})
	v.refused(t, "purge of west's key", "$KV."+recipeBucket+"."+westKey, func(ctx context.Context) error {
		return eastKV.Purge(ctx, westKey)
	})
	for _, name := range []string{recipeStream, "KV_" + recipeBucket} {
		v.refused(t, "purge of stream "+name, "$JS.API.STREAM.PURGE."+name, func(ctx context.Context) error {
			st, err := eastJS.Stream(ctx, name)
			if err != nil {
				return err
			}
			return st.Purge(ctx)
		})
		v.refused(t, "purge of west's subjects of "+name, "$JS.API.STREAM.PURGE."+name, func(ctx context.Context) error {
			st, err := eastJS.Stream(ctx, name)
			if err != nil {
				return err
			}
			return st.Purge(ctx, jetstream.WithPurgeSubject("kollect.west.>"))
		})
		v.refused(t, "deletion of a message of "+name, "$JS.API.STREAM.MSG.DELETE."+name, func(ctx context.Context) error {
			st, err := eastJS.Stream(ctx, name)
			if err != nil {
				return err
			}
			return st.DeleteMsg(ctx, 1)
		})
		v.refused(t, "update of stream "+name, "$JS.API.STREAM.UPDATE."+name, func(ctx context.Context) error {
			st, err := eastJS.Stream(ctx, name)
			if err != nil {
				return err
			}
			cfg := st.CachedInfo().Config
			cfg.MaxMsgs = 1
			_, err = eastJS.UpdateStream(ctx, cfg)
			return err
		})
		v.refused(t, "deletion of stream "+name, "$JS.API.STREAM.DELETE."+name, func(ctx context.Context) error {
			return eastJS.DeleteStream(ctx, name)
		})
	}
	// A roll-up of "all" on a subject east may publish would purge every cluster's messages:
	// neither the stream nor the bucket allows roll-ups.
	for _, subject := range []string{"kollect.east.pods.Deployment", "$KV." + recipeBucket + ".east.pods.x.y"} {
		m := nats.NewMsg(subject)
		m.Header.Set("Nats-Rollup", "all")
		if _, err := eastJS.PublishMsg(ctx, m); err == nil || !strings.Contains(err.Error(), "rollup not permitted") {
			t.Fatalf("roll-up of all on %s as east: %v, want it refused", subject, err)
		}
	}

	after := readServerState(t, adminJS)
	if before.String() != after.String() {
		t.Fatalf("the server's state changed:\nbefore %s\nafter  %s", before, after)
	}

	// east's own purge: the bucket's keys go (delete markers: the bucket allows no roll-ups),
	// the stream's purge is refused; the admin purges, and east's next attempt has nothing
	// left to remove.
	east := userSink(t, srv.URL, "east", "east")
	if _, err := east.Purge(ctx, "east", "pods", time.Time{}); !errors.Is(err, nats.ErrPermissionViolation) ||
		sink.ClassOf(err) != sink.Terminal || !strings.Contains(err.Error(), "$JS.API.STREAM.PURGE."+recipeStream) {
		t.Fatalf("east's purge of its own inventory: %v, want a terminal permissions violation on the stream purge", err)
	}
	admin, err := OpenServers(ctx, srv.URL, recipeStream, recipeBucket, "", nats.UserInfo("admin", "admin-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Purge(ctx, "east", "pods", time.Time{}); err != nil {
		t.Fatalf("the admin's purge of east/pods: %v", err)
	}
	if removed, err := east.Purge(ctx, "east", "pods", time.Time{}); err != nil || len(removed) != 0 {
		t.Fatalf("east's purge after the admin's: %+v, %v, want nothing to remove", removed, err)
	}
	if final := readServerState(t, adminJS); fmt.Sprint(final.westRevisions) != fmt.Sprint(before.westRevisions) {
		t.Fatalf("west's keys changed with east's purge: %v, were %v", final.westRevisions, before.westRevisions)
	}
}
