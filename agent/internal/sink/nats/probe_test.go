package nats

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/testenv"
)

// TestProbeOfAnUnreachableServerSaysWhy: the probe of a server nobody listens on fails
// transiently with the dial error, not only with its deadline.
func TestProbeOfAnUnreachableServerSaysWhy(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	err = newSink(t, spec(url, "NOWHERE", ""), defaultEnv).Probe(ctx)
	if err == nil || sink.ClassOf(err) != sink.Transient || !strings.Contains(err.Error(), "connection refused") ||
		!strings.Contains(err.Error(), url) {
		t.Fatalf("probe of %s: %v, want a transient error naming the server and the refused connection", url, err)
	}
}
