package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/sinktest"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// TestProbeRefusesATopicTheCredentialsMayNotWrite: a user whose ACLs allow describing and
// reading a topic but not writing it fails the probe terminally, naming the topic; the same
// user passes on a topic it may write, and so does the superuser on the first topic.
func TestProbeRefusesATopicTheCredentialsMayNotWrite(t *testing.T) {
	k, err := testenv.StartKafkaWithACLs(testenv.KafkaACLOptions{User: "admin", Password: "admin-pw",
		LimitedUser: "writer", LimitedPassword: "writer-pw", WritePrefix: "kollect."})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	env := sink.Env{Cluster: "c1", Namespace: "kollect", Name: "events", Secrets: sinktest.Secrets(map[string]map[string][]byte{
		"admin":  {"username": []byte("admin"), "password": []byte("admin-pw")},
		"writer": {"username": []byte("writer"), "password": []byte("writer-pw")},
		"wrong":  {"username": []byte("writer"), "password": []byte("not-the-writer-pw")},
	})}
	as := func(secret, topic string) *Sink {
		sp := spec(k.Addr, topic)
		sp.Kafka.CreateTopic = false
		sp.Kafka.SASLMechanism = v1alpha1.SASLMechanism("SCRAM-SHA-256")
		sp.Kafka.SecretRef = &v1alpha1.SecretReference{Name: secret}
		return newSink(t, sp, env)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	admin := as("admin", "audit.rows")
	for _, topic := range []string{"audit.rows", "kollect.rows"} {
		if _, err := admin.admin.CreateTopic(ctx, 1, -1, nil, topic); err != nil {
			t.Fatalf("creating %s: %v", topic, err)
		}
	}
	if err := admin.Probe(ctx); err != nil {
		t.Fatalf("the superuser's probe of audit.rows: %v", err)
	}
	if err := as("writer", "kollect.rows").Probe(ctx); err != nil {
		t.Fatalf("probe of a topic the user may write: %v", err)
	}
	err = as("writer", "audit.rows").Probe(ctx)
	if err == nil || sink.ClassOf(err) != sink.Terminal || !strings.Contains(err.Error(), "topic audit.rows: the credentials may not write to it") {
		t.Fatalf("probe of a topic the user may only read: %v, want a terminal error naming the topic", err)
	}
	if strings.Contains(err.Error(), "writer-pw") {
		t.Fatalf("the error shows the password: %v", err)
	}
}

// TestProbeOfRefusedCredentialsNamesThem: kfake closes the connection on a failed SASL login
// (Kafka answers SASL_AUTHENTICATION_FAILED); the probe's error then says what that may mean,
// naming the mechanism and the Secret, never the password.
func TestProbeOfRefusedCredentialsNamesThem(t *testing.T) {
	k, err := testenv.StartKafka(testenv.KafkaOptions{User: "kollect", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	env := sink.Env{Cluster: "c1", Namespace: "kollect", Name: "events", Secrets: sinktest.Secrets(map[string]map[string][]byte{
		"wrong": {"username": []byte("kollect"), "password": []byte("not-s3cret")},
	})}
	sp := spec(k.Addr, "rows")
	sp.Kafka.SASLMechanism = v1alpha1.SASLMechanism("SCRAM-SHA-512")
	sp.Kafka.SecretRef = &v1alpha1.SecretReference{Name: "wrong"}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = newSink(t, sp, env).Probe(ctx)
	if err == nil || !strings.Contains(err.Error(), "may have refused the SASL SCRAM-SHA-512 credentials of Secret wrong") {
		t.Fatalf("probe with a wrong password: %v, want the SASL hint", err)
	}
	if strings.Contains(err.Error(), "not-s3cret") {
		t.Fatalf("the error shows the password: %v", err)
	}
}
