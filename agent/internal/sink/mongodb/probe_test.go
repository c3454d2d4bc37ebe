package mongodb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	v1alpha1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

func TestProbe(t *testing.T) {
	ctx := context.Background()
	db := newDatabase(t)
	s, rec := newSink(t, db, "east")
	if err := s.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if w := writes(rec.take()); len(w) != 0 {
		t.Fatalf("probe wrote: %q", w)
	}

	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(db)
	sp.URI = fmt.Sprintf("mongodb://127.0.0.1:%d/", port)
	off, err := open(ctx, sp, testEnv("east"))
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := off.Probe(pctx); err == nil || sink.ClassOf(err) != sink.Transient {
		t.Fatalf("connection refused: %v (%s)", err, sink.ClassOf(err))
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want sink.ErrorClass
	}{
		{mongo.CommandError{Code: 18, Name: "AuthenticationFailed", Message: "Authentication failed."}, sink.Terminal},
		{mongo.CommandError{Code: 13, Name: "Unauthorized", Message: "not authorized on db to execute command insert"}, sink.Terminal},
		{mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Code: 11000, Message: "E11000 duplicate key"}}}}, sink.Transient},
		{mongo.CommandError{Code: 91, Name: "ShutdownInProgress"}, sink.Transient},
		{errors.New("connection() error occurred during connection handshake: auth error: sasl conversation error"), sink.Terminal},
		{context.DeadlineExceeded, sink.Transient},
	} {
		if got := sink.ClassOf(classify(fmt.Errorf("wrapped: %w", tc.err))); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestPreview(t *testing.T) {
	ctx := context.Background()
	s, rec := newSink(t, newDatabase(t), "east")
	p, err := s.Preview(ctx, "east", "apps")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(p.Statements, "\n")
	for _, want := range []string{`createIndex({"cluster":1,"inventory":1,"target":1,"uid":1,"gen":1}, {name: "kollect_identity_gen", unique: true})`,
		`updateMany({_id: {$in: [ended versions]}, cluster: "east", inventory: "apps"}, {$set: {gen_end: <generation>}})`,
		`$unset: {pending: ""}`, `deleteMany({cluster: "east", inventory: "apps", gen_end: {$lte: <generation>}})`} {
		if !strings.Contains(joined, want) {
			t.Errorf("preview lacks %s:\n%s", want, joined)
		}
	}
	if !strings.Contains(p.Message, "full load") {
		t.Errorf("message %q", p.Message)
	}
	if w := writes(rec.take()); len(w) != 0 {
		t.Fatalf("preview wrote: %q", w)
	}
	if err := (&agent{sink: s, cluster: "east", inventory: "apps"}).export(ctx, sinktest.Deployments("east", "apps", 3, 1)); err != nil {
		t.Fatal(err)
	}
	if p, err = s.Preview(ctx, "east", "apps"); err != nil || !strings.Contains(p.Message, "holds 3 rows") {
		t.Fatalf("after an export: %v %q", err, p.Message)
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	getter := func(_ context.Context, name string) (map[string][]byte, error) {
		switch name {
		case "creds":
			return map[string][]byte{"username": []byte("u"), "password": []byte("p")}, nil
		case "nouser":
			return map[string][]byte{"password": []byte("p")}, nil
		}
		return nil, sink.Terminalf("no secret %s", name)
	}
	env := sink.Env{Namespace: "ns", Name: "m", Secrets: getter}
	st, err := resolve(ctx, &v1alpha1.MongoDBSinkConfig{URI: "mongodb://db.example:27017/?replicaSet=rs0", Database: "inv",
		SecretRef: &v1alpha1.SecretReference{Name: "creds"}, TLS: &v1alpha1.TLSConfig{Enabled: true, ServerName: "mongo.internal"}}, env)
	if err != nil {
		t.Fatal(err)
	}
	if st.client.Auth == nil || st.client.Auth.Username != "u" || st.client.Auth.AuthSource != "admin" {
		t.Fatalf("auth %+v", st.client.Auth)
	}
	if st.client.TLSConfig == nil || st.client.TLSConfig.ServerName != "mongo.internal" {
		t.Fatalf("tls %+v", st.client.TLSConfig)
	}
	if st.collection != "rows" || strings.Contains(st.destination, "p") && strings.Contains(st.destination, ":p@") {
		t.Fatalf("collection %s destination %s", st.collection, st.destination)
	}
	for name, sp := range map[string]*v1alpha1.MongoDBSinkConfig{
		"credentials in the uri": {URI: "mongodb://u:p@db/", Database: "inv"},
		"no username":            {URI: "mongodb://db/", Database: "inv", SecretRef: &v1alpha1.SecretReference{Name: "nouser"}},
		"missing secret":         {URI: "mongodb://db/", Database: "inv", SecretRef: &v1alpha1.SecretReference{Name: "absent"}},
		"not a mongodb uri":      {URI: "http://db/", Database: "inv"},
	} {
		if _, err := resolve(ctx, sp, env); err == nil || sink.ClassOf(err) != sink.Terminal {
			t.Errorf("%s: %v", name, err)
		}
	}
}
