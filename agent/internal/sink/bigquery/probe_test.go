package bigquery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

func TestProbe(t *testing.T) {
	ctx := context.Background()
	s, rec := newSink(t, newDataset(t), "east")
	if err := s.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if m := mutations(rec.Calls()); len(m) != 0 {
		t.Fatalf("probe wrote: %v", m)
	}
	// The emulator has no authentication: revoked credentials are injected as 401 answers.
	rec.RejectAuth(true)
	if err := s.Probe(ctx); err == nil || sink.ClassOf(err) != sink.Terminal {
		t.Fatalf("rejected credentials: %v", err)
	}
	rec.RejectAuth(false)

	// The dataset above, not created yet, passed (the first export creates it); in a project
	// that does not exist it cannot be created.
	sp := spec(newDataset(t))
	sp.Project = "no-such-project"
	elsewhere, err := open(ctx, sp, sink.Env{Cluster: "east"})
	if err != nil {
		t.Fatal(err)
	}
	defer elsewhere.Close()
	if err := elsewhere.Probe(ctx); err == nil || sink.ClassOf(err) != sink.Terminal || !strings.Contains(err.Error(), "project no-such-project") {
		t.Fatalf("a project that does not exist: %v, want a terminal error naming it", err)
	}

	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	sp = spec("nowhere")
	sp.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", port)
	off, err := open(ctx, sp, sink.Env{Cluster: "east"})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := off.Probe(pctx); err == nil || sink.ClassOf(err) != sink.Transient {
		t.Fatalf("connection refused: %v", err)
	}
}

func TestPreview(t *testing.T) {
	ctx := context.Background()
	s, rec := newSink(t, newDataset(t), "east")
	p, err := s.Preview(ctx, "east", "apps")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(p.Statements, "\n")
	for _, want := range []string{"CREATE SCHEMA IF NOT EXISTS `test.", "attributes JSON NOT NULL", "CLUSTER BY cluster, inventory, kind",
		"BEGIN TRANSACTION", "NOT IN (SELECT CONCAT(target, '/', uid) FROM `test.", "COMMIT TRANSACTION"} {
		if !strings.Contains(joined, want) {
			t.Errorf("preview lacks %q", want)
		}
	}
	if m := mutations(rec.Calls()); len(m) != 0 {
		t.Fatalf("preview wrote: %v", m)
	}
	if err := (&agent{sink: s, cluster: "east", inventory: "apps"}).export(ctx, mkRows("east", 3, 1)); err != nil {
		t.Fatal(err)
	}
	if p, _ = s.Preview(ctx, "east", "apps"); !strings.Contains(p.Message, "holds 3 rows") {
		t.Fatalf("message %q", p.Message)
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	getter := func(_ context.Context, name string) (map[string][]byte, error) {
		if name == "key" {
			return map[string][]byte{"key.json": []byte(`{"type": "service_account"}`)}, nil
		}
		return map[string][]byte{}, nil
	}
	env := sink.Env{Namespace: "ns", Name: "bq", Secrets: getter}
	st, err := resolve(ctx, &v1alpha1.BigQuerySinkConfig{Project: "p", Dataset: "d", SecretRef: &v1alpha1.SecretReference{Name: "key"}}, env)
	if err != nil || st.table != "rows" || st.location != "US" || len(st.options) != 1 {
		t.Fatalf("%+v %v", st, err)
	}
	for name, sp := range map[string]*v1alpha1.BigQuerySinkConfig{
		"secret without key.json": {Project: "p", Dataset: "d", SecretRef: &v1alpha1.SecretReference{Name: "empty"}},
		"no project":              {Dataset: "d"},
	} {
		if _, err := resolve(ctx, sp, env); err == nil || sink.ClassOf(err) != sink.Terminal {
			t.Errorf("%s: %v", name, err)
		}
	}
}
