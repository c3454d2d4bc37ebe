package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/hub/internal/assign"
	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/store"
	"kollect.dev/hub/internal/store/sqlstore"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

func TestWakesOnlyChangedClusters(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := sqlstore.Open(ctx, filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	if err := s.CreateBootstrapToken(ctx, store.BootstrapToken{ID: "t", Hash: "h", ExpiresAt: now.Add(time.Hour), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, env string }{{"a", "prod"}, {"b", "dev"}} {
		if _, err := s.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h", Name: c.name, CredentialHash: "cred-" + c.name,
			Labels: map[string]string{"env": c.env}, Now: now}, labelsel.Match); err != nil {
			t.Fatal(err)
		}
	}
	d := New(s, assign.New(s), slog.New(slog.NewTextHandler(io.Discard, nil)))
	// The streams open before the dispatcher runs: a stream that opens after the first
	// snapshot is not woken by it (its handler reads Current itself), and under load Run's
	// goroutine could build that snapshot before these lines ran.
	connA, leaveA := d.Subscribe("a")
	defer leaveA()
	connB, leaveB := d.Subscribe("b")
	defer leaveB()
	// Subscribing to a dispatcher without a snapshot kicked it; Run builds its first snapshot
	// anyway, and a second one from that kick could wake a stream again before the test
	// records what it sent.
	select {
	case <-d.kick:
	default:
	}
	go d.Run(ctx, time.Hour) // only Kick wakes it in this test
	// Both are woken by the first snapshot: nothing was sent to them yet.
	for _, c := range []*Conn{connA, connB} {
		select {
		case <-c.Wake:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s not woken by the first snapshot", c.Cluster)
		}
		cfg, ok := d.Current(c.Cluster)
		if !ok || cfg.GetConfigDigest() != assign.EmptyDigest {
			t.Fatalf("%s: current %v %v", c.Cluster, cfg, ok)
		}
		c.Sent(cfg.GetConfigDigest())
	}
	if _, ok := d.Current("unknown"); ok {
		t.Fatal("an unknown cluster has a configuration")
	}
	if d.Connected() != 2 {
		t.Fatalf("connected = %d", d.Connected())
	}

	sel, _ := labelsel.Encode(mustSel(t, `{"matchLabels":{"env":"prod"}}`))
	if _, _, _, err := s.CreateRevision(ctx, store.Revision{Bundle: "base", Manifests: "x", Selector: sel, Digest: "d1",
		Objects: "[]", CreatedAt: now}, "", false, labelsel.Match); err != nil {
		t.Fatal(err)
	}
	d.Kick()
	select {
	case <-connA.Wake:
	case <-time.After(5 * time.Second):
		t.Fatal("a was not woken")
	}
	if cfg, _ := d.Current("a"); len(cfg.GetBundles()) != 1 || cfg.GetBundles()[0].GetRevision() != 1 {
		t.Fatalf("a's configuration: %v", cfg)
	}
	// The refresh that woke a wakes every connection under the dispatcher's lock; Connected
	// takes that lock, so once it returns that refresh is done and a wake of b would be
	// pending: no sleep needed to see it did not happen (the next refresh is an hour away).
	_ = d.Connected()
	select {
	case <-connB.Wake:
		t.Fatal("b was woken although its configuration did not change")
	default:
	}

	refused := errors.New("revoked")
	d.Disconnect("a", refused)
	select {
	case <-connA.Done:
		if !errors.Is(connA.Err(), refused) {
			t.Fatalf("err = %v", connA.Err())
		}
	default:
		t.Fatal("Disconnect did not end a's stream")
	}
	leaveA()
	if d.Connected() != 1 {
		t.Fatalf("connected after leaving = %d", d.Connected())
	}
}

func mustSel(t *testing.T, raw string) *metav1.LabelSelector {
	t.Helper()
	sel, err := labelsel.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// TestPreviewOncePerStream: a preview reaches every stream of the clusters it names once,
// however often it is offered (this replica's own delivery and the notifications of others).
func TestPreviewOncePerStream(t *testing.T) {
	d := New(nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a1, leaveA1 := d.Subscribe("a")
	defer leaveA1()
	a2, leaveA2 := d.Subscribe("a")
	defer leaveA2()
	b, leaveB := d.Subscribe("b")
	defer leaveB()
	p := &fleetv1.PreviewRequest{Id: "pv-1"}
	until := time.Now().Add(time.Hour)
	if n := d.Preview(p, []string{"a", "c"}, until); n != 2 {
		t.Fatalf("first offer reached %d streams, want both of a's", n)
	}
	if n := d.Preview(p, []string{"a", "b"}, until); n != 1 {
		t.Fatalf("second offer reached %d streams, want only b's", n)
	}
	// A stream of c opened while the preview is open gets it; one of b, not asked first, not.
	c, leaveC := d.Subscribe("c")
	defer leaveC()
	if len(c.Previews) != 1 {
		t.Fatalf("a stream opened while the preview is open holds %d previews, want it", len(c.Previews))
	}
	b2, leaveB2 := d.Subscribe("b")
	defer leaveB2()
	if len(b2.Previews) != 0 {
		t.Fatal("a stream of a cluster the first offer did not name got the preview")
	}
	// Once its deadline passed, a new stream gets nothing.
	d.Preview(&fleetv1.PreviewRequest{Id: "pv-past"}, []string{"d"}, time.Now())
	d2, leaveD2 := d.Subscribe("d")
	defer leaveD2()
	if len(d2.Previews) != 0 {
		t.Fatal("a stream opened after the preview's deadline got it")
	}
	for name, c := range map[string]*Conn{"a1": a1, "a2": a2, "b": b} {
		if len(c.Previews) != 1 || (<-c.Previews).GetId() != "pv-1" {
			t.Fatalf("stream %s holds the wrong previews", name)
		}
	}
	for i := range previewQueue + 1 {
		d.Preview(&fleetv1.PreviewRequest{Id: fmt.Sprint("q-", i)}, []string{"b"}, until)
	}
	if len(b.Previews) != previewQueue {
		t.Fatalf("a stream that sends nothing holds %d previews, want the queue's %d", len(b.Previews), previewQueue)
	}
}
