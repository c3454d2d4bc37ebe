package main

import (
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

// TestVerbosityCappedBelowClientGoBodies: at --zap-log-level=10 client-go would log the bodies
// of the Secrets the agent reads (V(8)); the agent's loggers, and those derived from them the
// way controller-runtime derives a reconcile's, never enable that level.
func TestVerbosityCappedBelowClientGoBodies(t *testing.T) {
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{Verbosity: 10})
	l := capVerbosity(base).WithName("controller").WithValues("reconcileID", "1")
	if l.V(8).Enabled() || !l.V(7).Enabled() {
		t.Fatalf("V(8) enabled %t, V(7) enabled %t: want only V(7)", l.V(8).Enabled(), l.V(7).Enabled())
	}
	l.V(8).Info("Response Body", "body", `{"kind":"Secret","data":{"password":"c2VjcmV0"}}`)
	l.V(7).Info("Request Headers")
	l.Info("exported")
	got := strings.Join(lines, "\n")
	if strings.Contains(got, "Response Body") || !strings.Contains(got, "Request Headers") || !strings.Contains(got, `"reconcileID"="1"`) {
		t.Fatalf("logged:\n%s", got)
	}
}
