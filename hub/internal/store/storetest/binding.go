package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
)

// testTokenBinding: a bootstrap token bound to a cluster name and labels round-trips, registers
// its cluster with exactly those labels, and refuses another name or other labels (a retry
// too) without taking a use.
func testTokenBinding(t *testing.T, s store.Store) {
	ctx := context.Background()
	bound := map[string]string{"env": "staging", "region": "eu"}
	must(t, s.CreateBootstrapToken(ctx, store.BootstrapToken{ID: "edge", Hash: "h-edge", ExpiresAt: t0.Add(time.Hour),
		MaxUses: 3, CreatedAt: t0, ClusterName: "edge-1", Labels: bound}))
	bootstrap(t, s, "free", 1, time.Hour, false)
	toks, err := s.ListBootstrapTokens(ctx)
	must(t, err)
	for _, tok := range toks {
		if tok.ID == "edge" && (tok.ClusterName != "edge-1" || tok.Labels["env"] != "staging" || len(tok.Labels) != 2) {
			t.Fatalf("bound token read back as %+v", tok)
		}
		if tok.ID == "free" && (tok.ClusterName != "" || tok.Labels != nil) {
			t.Fatalf("unbound token read back as %+v", tok)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"rogue", bound, "only cluster edge-1, not rogue"},
		{"edge-1", map[string]string{"env": "prod", "region": "eu"}, "exactly env=staging,region=eu, not env=prod,region=eu"},
		{"edge-1", map[string]string{"env": "staging", "region": "eu", "tier": "gold"}, "not env=staging,region=eu,tier=gold"},
		{"edge-1", nil, "not (no labels)"},
	} {
		_, err := register(s, "edge", c.name, "cred-x", c.labels, false)
		if !errors.Is(err, store.ErrTokenBinding) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("registering %s %v: %v, want ErrTokenBinding saying %q", c.name, c.labels, err, c.want)
		}
	}
	if _, err := register(s, "edge", "edge-1", "cred-1", map[string]string{"region": "eu", "env": "staging"}, false); err != nil {
		t.Fatalf("the bound registration: %v", err)
	}
	toks, err = s.ListBootstrapTokens(ctx)
	must(t, err)
	for _, tok := range toks {
		if tok.ID == "edge" && tok.Uses != 1 {
			t.Fatalf("refused registrations took uses: %d", tok.Uses)
		}
	}
	// An unbound token registers any name with any labels.
	if _, err := register(s, "free", "anything", "cred-2", map[string]string{"env": "prod"}, false); err != nil {
		t.Fatalf("an unbound token: %v", err)
	}
}
