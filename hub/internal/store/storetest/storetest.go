package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
)

// Factory returns a fresh, empty store for one test; the store is closed by the suite.
type Factory func(t *testing.T) store.Store

// matchAll is the suite's Matcher: the selector JSON is a map of labels that must all be equal
// (the hub's real matcher lives in labelsel; the store only calls it).
func matchAll(selectorJSON string, labels map[string]string) (bool, error) {
	var want map[string]string
	if err := json.Unmarshal([]byte(selectorJSON), &want); err != nil {
		return false, err
	}
	for k, v := range want {
		if labels[k] != v {
			return false, nil
		}
	}
	return true, nil
}

// Run runs every store test against stores from newStore.
func Run(t *testing.T, newStore Factory) {
	tests := map[string]func(t *testing.T, s store.Store){
		"Tokens":                  testTokens,
		"TokenBinding":            testTokenBinding,
		"RegisterAndTokenRules":   testRegister,
		"ReplaceAndRevoke":        testReplaceAndRevoke,
		"RegistrationRetry":       testRegistrationRetry,
		"CredentialRotation":      testCredentialRotation,
		"ClusterCredentials":      testClusterCredentials,
		"ConcurrentRegistrations": testConcurrentRegistrations,
		"BundlesAndDesired":       testBundles,
		"Heartbeat":               testHeartbeat,
		"HeartbeatHistory":        testHeartbeatHistory,
		"HeartbeatCredential":     testHeartbeatCredentialCheck,
		"Audit":                   testAudit,
		"HoldAndStable":           testHoldAndStable,
		"Rollouts":                testRollouts,
		"RolloutRaces":            testRolloutRaces,
		"LargeRollout":            testLargeRollout,
		"ClusterEpoch":            testClusterEpoch,
		"Observe":                 testObserve,
		"Previews":                testPreviews,
		"Approval":                testApproval,
		"Rejection":               testRejection,
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			fn(t, s)
		})
	}
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func bootstrap(t *testing.T, s store.Store, id string, maxUses int64, ttl time.Duration, allowReplace bool) {
	t.Helper()
	must(t, s.CreateBootstrapToken(context.Background(), store.BootstrapToken{ID: id, Hash: "h-" + id,
		Description: "test", ExpiresAt: t0.Add(ttl), MaxUses: maxUses, AllowReplace: allowReplace,
		CreatedBy: "token:admin", CreatedAt: t0}))
}

func register(s store.Store, token, name, cred string, labels map[string]string, replace bool) (store.Cluster, error) {
	return s.RegisterCluster(context.Background(), store.RegisterParams{TokenHash: "h-" + token, Name: name,
		Labels: labels, CredentialHash: cred, Replace: replace, AgentVersion: "v1", KubernetesVersion: "v1.37.0",
		Now: t0.Add(time.Minute)}, matchAll)
}

func testTokens(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "b1", 3, time.Hour, true)
	toks, err := s.ListBootstrapTokens(ctx)
	must(t, err)
	if len(toks) != 1 || toks[0].MaxUses != 3 || !toks[0].AllowReplace || !toks[0].ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("bootstrap tokens: %+v", toks)
	}
	must(t, s.RevokeBootstrapToken(ctx, "b1"))
	if err := s.RevokeBootstrapToken(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoking unknown token: %v", err)
	}

	must(t, s.CreateAPIToken(ctx, store.APIToken{ID: "a1", Name: "ci", Hash: "ha1", Role: store.RoleOperator, CreatedBy: "x", CreatedAt: t0}))
	if err := s.CreateAPIToken(ctx, store.APIToken{ID: "a2", Name: "ci", Hash: "ha2", Role: store.RoleViewer, CreatedAt: t0}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate live API token name: %v", err)
	}
	got, err := s.APITokenByHash(ctx, "ha1")
	must(t, err)
	if got.Name != "ci" || got.Role != store.RoleOperator {
		t.Fatalf("API token: %+v", got)
	}
	must(t, s.RevokeAPIToken(ctx, "a1"))
	if _, err := s.APITokenByHash(ctx, "ha1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoked API token still found: %v", err)
	}
	// The name is free again once its token is revoked.
	must(t, s.CreateAPIToken(ctx, store.APIToken{ID: "a3", Name: "ci", Hash: "ha3", Role: store.RoleAdmin, CreatedAt: t0}))
	list, err := s.ListAPITokens(ctx)
	must(t, err)
	if len(list) != 2 {
		t.Fatalf("API tokens: %+v", list)
	}
}

func testRegister(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "two", 2, time.Hour, false)
	bootstrap(t, s, "expired", 0, -time.Hour, false)
	bootstrap(t, s, "revoked", 0, time.Hour, false)
	must(t, s.RevokeBootstrapToken(ctx, "revoked"))
	now := t0.Add(time.Minute)
	must(t, s.BootstrapTokenUsable(ctx, "h-two", now))

	c, err := register(s, "two", "alpha", "cred-a", map[string]string{"env": "prod"}, false)
	must(t, err)
	if c.Name != "alpha" || c.Labels["env"] != "prod" || c.CredentialHash != "cred-a" || c.Revoked || c.AgentVersion != "v1" {
		t.Fatalf("registered cluster: %+v", c)
	}
	if _, err := register(s, "two", "alpha", "cred-a2", nil, false); !errors.Is(err, store.ErrClusterExists) {
		t.Fatalf("duplicate cluster: %v", err)
	}
	// The refused registration must not have used the token up.
	_, err = register(s, "two", "beta", "cred-b", nil, false)
	must(t, err)
	if _, err := register(s, "two", "gamma", "cred-c", nil, false); !errors.Is(err, store.ErrTokenInvalid) {
		t.Fatalf("used-up token: %v", err)
	}
	for _, tok := range []string{"expired", "revoked", "unknown"} {
		if _, err := register(s, tok, "delta", "cred-d", nil, false); !errors.Is(err, store.ErrTokenInvalid) {
			t.Fatalf("%s token: %v", tok, err)
		}
	}
	// The read-only check agrees with registration: used up, expired, revoked and unknown
	// tokens are all unusable.
	for _, tok := range []string{"two", "expired", "revoked", "unknown"} {
		if err := s.BootstrapTokenUsable(ctx, "h-"+tok, now); !errors.Is(err, store.ErrTokenInvalid) {
			t.Fatalf("BootstrapTokenUsable(%s) = %v, want ErrTokenInvalid", tok, err)
		}
	}
	toks, err := s.ListBootstrapTokens(ctx)
	must(t, err)
	for _, tok := range toks {
		if tok.ID == "two" && tok.Uses != 2 {
			t.Fatalf("token uses = %d, want 2", tok.Uses)
		}
	}
	byCred, err := s.ClusterByCredential(ctx, "cred-b")
	must(t, err)
	if byCred.Name != "beta" {
		t.Fatalf("by credential: %+v", byCred)
	}
	all, err := s.ListClusters(ctx)
	must(t, err)
	if len(all) != 2 || all[0].Name != "alpha" || all[1].Name != "beta" {
		t.Fatalf("clusters: %+v", all)
	}
}

func testReplaceAndRevoke(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "plain", 0, time.Hour, false)
	bootstrap(t, s, "replacer", 0, time.Hour, true)
	_, err := register(s, "plain", "alpha", "cred-1", nil, false)
	must(t, err)
	// Asking is not enough with a token that does not allow replacement…
	if _, err := register(s, "plain", "alpha", "cred-2", nil, true); !errors.Is(err, store.ErrClusterExists) {
		t.Fatalf("replace with plain token: %v", err)
	}
	// …nor is the token's permission without the request asking.
	if _, err := register(s, "replacer", "alpha", "cred-2", nil, false); !errors.Is(err, store.ErrClusterExists) {
		t.Fatalf("replace without asking: %v", err)
	}
	_, err = register(s, "replacer", "alpha", "cred-2", map[string]string{"new": "yes"}, true)
	must(t, err)
	if _, err := s.ClusterByCredential(ctx, "cred-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("replaced credential still valid: %v", err)
	}
	if live, err := s.LiveClusters(ctx); err != nil || len(live) != 1 || live[0] != "alpha" {
		t.Fatalf("live clusters: %v %v", live, err)
	}
	must(t, s.RevokeCluster(ctx, "alpha"))
	if live, err := s.LiveClusters(ctx); err != nil || len(live) != 0 {
		t.Fatalf("live clusters after revocation: %v %v", live, err)
	}
	c, err := s.ClusterByCredential(ctx, "cred-2")
	must(t, err)
	if !c.Revoked || c.Labels["new"] != "yes" {
		t.Fatalf("revoked cluster: %+v", c)
	}
	if err := s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: t0}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("heartbeat of revoked cluster: %v", err)
	}
	// A revoked cluster's name stays blocked, even for a token that allows replacement, and
	// the refusal uses no token…
	for _, tok := range []string{"plain", "replacer"} {
		if _, err := register(s, tok, "alpha", "cred-3", nil, true); !errors.Is(err, store.ErrClusterRevoked) {
			t.Fatalf("registering a revoked name with %s: %v, want ErrClusterRevoked", tok, err)
		}
	}
	// …until an admin releases it; then any valid token may take it, once.
	must(t, s.ReleaseCluster(ctx, "alpha"))
	c, err = register(s, "plain", "alpha", "cred-3", nil, false)
	must(t, err)
	if c.Revoked || c.Released || c.CredentialHash != "cred-3" {
		t.Fatalf("re-registered cluster: %+v", c)
	}
	if err := s.ReleaseCluster(ctx, "alpha"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("releasing a live cluster: %v, want ErrConflict", err)
	}
	// A second revocation blocks the name again.
	must(t, s.RevokeCluster(ctx, "alpha"))
	if _, err := register(s, "plain", "alpha", "cred-4", nil, false); !errors.Is(err, store.ErrClusterRevoked) {
		t.Fatalf("registering a name revoked again: %v", err)
	}
	if err := s.RevokeCluster(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoking unknown cluster: %v", err)
	}
	if err := s.ReleaseCluster(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("releasing unknown cluster: %v", err)
	}
}

// testRegistrationRetry: a registration repeated with the same token and registration key
// within the retry window, before its credential was used, completes the first one (new
// credential, no use taken); without the key or with another, after a heartbeat, with another
// token, past the window or once the token is revoked, it does not.
func testRegistrationRetry(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "once", 1, time.Hour, false)
	bootstrap(t, s, "other", 5, time.Hour, false)
	retryWith := func(token, key, name, cred string, since time.Time) (store.Cluster, error) {
		return s.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h-" + token, Name: name, CredentialHash: cred,
			Labels: map[string]string{"try": cred}, Now: t0.Add(2 * time.Minute), RetrySince: since, KeyHash: key}, matchAll)
	}
	retry := func(token, name, cred string, since time.Time) (store.Cluster, error) {
		return retryWith(token, "k-"+name, name, cred, since)
	}
	first, err := s.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h-once", Name: "alpha", CredentialHash: "cred-1",
		KeyHash: "k-alpha", Now: t0.Add(time.Minute)}, matchAll)
	must(t, err)
	if first.Retried || first.BootstrapHash != "h-once" {
		t.Fatalf("first registration: %+v", first)
	}
	if ok, err := s.RegistrationRetryable(ctx, "alpha", "h-once", "k-alpha", t0); err != nil || !ok {
		t.Fatalf("RegistrationRetryable before any heartbeat: %v %v", ok, err)
	}
	// Another key, or none: another holder of the token, not the agent retrying.
	for _, key := range []string{"k-thief", ""} {
		if ok, _ := s.RegistrationRetryable(ctx, "alpha", "h-once", key, t0); ok {
			t.Fatalf("retryable with key %q", key)
		}
		if _, err := retryWith("once", key, "alpha", "cred-x", t0); !errors.Is(err, store.ErrTokenInvalid) {
			t.Fatalf("a retry with key %q: %v, want ErrTokenInvalid (the token is used up)", key, err)
		}
	}
	again, err := retry("once", "alpha", "cred-2", t0)
	must(t, err)
	if !again.Retried || again.CredentialHash != "cred-2" || again.Labels["try"] != "cred-2" {
		t.Fatalf("retried registration: %+v", again)
	}
	if _, err := s.ClusterByCredential(ctx, "cred-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the first credential survived the retry: %v", err)
	}
	toks, err := s.ListBootstrapTokens(ctx)
	must(t, err)
	for _, tok := range toks {
		if tok.ID == "once" && tok.Uses != 1 {
			t.Fatalf("the retry took a use: %d", tok.Uses)
		}
	}
	// Past the window, or with another token: not a retry.
	if ok, _ := s.RegistrationRetryable(ctx, "alpha", "h-once", "k-alpha", t0.Add(time.Hour)); ok {
		t.Fatal("retryable past the window")
	}
	if _, err := retry("other", "alpha", "cred-3", t0); !errors.Is(err, store.ErrClusterExists) {
		t.Fatalf("another token: %v, want ErrClusterExists", err)
	}
	// Once the credential was used, never again.
	must(t, s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: t0.Add(3 * time.Minute), Status: "{}"}))
	if ok, _ := s.RegistrationRetryable(ctx, "alpha", "h-once", "k-alpha", t0); ok {
		t.Fatal("retryable after a heartbeat")
	}
	if _, err := retry("once", "alpha", "cred-4", t0); !errors.Is(err, store.ErrTokenInvalid) {
		t.Fatalf("retry after a heartbeat: %v, want ErrTokenInvalid (the token is used up)", err)
	}
	// A revoked token completes nothing.
	_, err = s.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h-other", Name: "beta", CredentialHash: "cred-b",
		KeyHash: "k-beta", Now: t0.Add(time.Minute)}, matchAll)
	must(t, err)
	must(t, s.RevokeBootstrapToken(ctx, "other"))
	if ok, _ := s.RegistrationRetryable(ctx, "beta", "h-other", "k-beta", t0); ok {
		t.Fatal("retryable with a revoked token")
	}
}

// testCredentialRotation: a rotation with the current credential keeps it as the previous
// one with its deadline; one with the previous credential replaces only the current one, and
// only until a heartbeat presented the current one; any other credential, or a revoked
// cluster, rotates nothing. API token expiry round-trips.
func testCredentialRotation(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "tok", 1, time.Hour, false)
	_, err := s.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h-tok", Name: "alpha", CredentialHash: "c1",
		Now: t0, CredentialExpiresAt: t0.Add(time.Hour)}, matchAll)
	must(t, err)
	c, err := s.RotateCredential(ctx, store.Rotation{Cluster: "alpha", PresentedHash: "c1", NewHash: "c2",
		NewExpiresAt: t0.Add(2 * time.Hour), PreviousUntil: t0.Add(10 * time.Minute)})
	must(t, err)
	if c.CredentialHash != "c2" || !c.CredentialExpiresAt.Equal(t0.Add(2*time.Hour)) || c.PreviousCredentialHash != "c1" ||
		!c.PreviousExpiresAt.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("after a rotation: %+v", c)
	}
	if byPrev, err := s.ClusterByCredential(ctx, "c1"); err != nil || byPrev.Name != "alpha" {
		t.Fatalf("the previous credential: %+v %v", byPrev, err)
	}
	c, err = s.RotateCredential(ctx, store.Rotation{Cluster: "alpha", PresentedHash: "c1", NewHash: "c3",
		NewExpiresAt: t0.Add(3 * time.Hour), PreviousUntil: t0.Add(time.Hour)})
	must(t, err)
	if c.CredentialHash != "c3" || c.PreviousCredentialHash != "c1" || !c.PreviousExpiresAt.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("after a rotation with the previous credential: %+v", c)
	}
	if _, err := s.ClusterByCredential(ctx, "c2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the dropped credential: %v", err)
	}
	if _, err := s.RotateCredential(ctx, store.Rotation{Cluster: "alpha", PresentedHash: "c2", NewHash: "c4"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rotating with a dropped credential: %v", err)
	}
	// A heartbeat with the previous credential leaves it the right to rotate; one with the
	// current credential ends it.
	must(t, s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: t0.Add(time.Minute), Presented: "c1"}))
	c, err = s.RotateCredential(ctx, store.Rotation{Cluster: "alpha", PresentedHash: "c1", NewHash: "c3b",
		NewExpiresAt: t0.Add(3 * time.Hour), PreviousUntil: t0.Add(time.Hour)})
	must(t, err)
	must(t, s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: t0.Add(2 * time.Minute), Presented: "c3b"}))
	if _, err := s.RotateCredential(ctx, store.Rotation{Cluster: "alpha", PresentedHash: "c1", NewHash: "c5",
		NewExpiresAt: t0.Add(3 * time.Hour), PreviousUntil: t0.Add(time.Hour)}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rotating with the previous credential once the current one was used: %v", err)
	}
	if c, err = s.RotateCredential(ctx, store.Rotation{Cluster: "alpha", PresentedHash: "c3b", NewHash: "c3",
		NewExpiresAt: t0.Add(3 * time.Hour), PreviousUntil: t0.Add(time.Hour)}); err != nil || c.CredentialHash != "c3" {
		t.Fatalf("rotating with the current credential: %+v %v", c, err)
	}
	must(t, s.RevokeCluster(ctx, "alpha"))
	if _, err := s.RotateCredential(ctx, store.Rotation{Cluster: "alpha", PresentedHash: "c3", NewHash: "c4"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rotating a revoked cluster: %v", err)
	}
	must(t, s.CreateAPIToken(ctx, store.APIToken{ID: "e1", Name: "short", Hash: "he1", Role: store.RoleViewer, CreatedAt: t0,
		ExpiresAt: t0.Add(time.Hour)}))
	tok, err := s.APITokenByHash(ctx, "he1")
	must(t, err)
	if !tok.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("API token expiry: %v", tok.ExpiresAt)
	}
}

// testClusterCredentials: every cluster's name, revocation and credential fields in one read,
// as ClusterByCredential answers them.
func testClusterCredentials(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "tok", 0, time.Hour, false)
	for _, name := range []string{"alpha", "beta", "gamma"} {
		_, err := s.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h-tok", Name: name, CredentialHash: "c-" + name,
			Now: t0, CredentialExpiresAt: t0.Add(time.Hour), Labels: map[string]string{"env": "prod"}}, matchAll)
		must(t, err)
	}
	_, err := s.RotateCredential(ctx, store.Rotation{Cluster: "alpha", PresentedHash: "c-alpha", NewHash: "c2-alpha",
		NewExpiresAt: t0.Add(2 * time.Hour), PreviousUntil: t0.Add(10 * time.Minute)})
	must(t, err)
	must(t, s.RevokeCluster(ctx, "beta"))
	all, err := s.ClusterCredentials(ctx)
	must(t, err)
	if len(all) != 3 {
		t.Fatalf("%d clusters, want 3: %+v", len(all), all)
	}
	for _, got := range all {
		want, err := s.GetCluster(ctx, got.Name)
		must(t, err)
		if got.Revoked != want.Revoked || store.CredentialFactsOf(got) != store.CredentialFactsOf(want) {
			t.Errorf("credentials of %s: %+v, want those of %+v", got.Name, got, want)
		}
		if got.Labels != nil || got.Status != "" {
			t.Errorf("credentials of %s carry more than credentials: %+v", got.Name, got)
		}
	}
}

func testConcurrentRegistrations(t *testing.T, s store.Store) {
	bootstrap(t, s, "five", 5, time.Hour, false)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ok, bad int
	)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := register(s, "five", fmt.Sprintf("c%02d", i), fmt.Sprintf("cred-%d", i), nil, false)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrTokenInvalid):
				bad++
			default:
				t.Errorf("registration %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if ok != 5 || bad != 15 {
		t.Fatalf("max_uses 5: %d registrations succeeded, %d refused", ok, bad)
	}
}

func revision(bundle, manifests, selector string) store.Revision {
	return store.Revision{Bundle: bundle, Manifests: manifests, Selector: selector, Digest: "d:" + manifests + selector,
		Objects: "[]", CreatedBy: "token:ci", CreatedAt: t0, Message: "m"}
}

func desiredOf(t *testing.T, s store.Store, cluster string) map[string]int64 {
	t.Helper()
	ds, err := s.Desired(context.Background(), cluster)
	must(t, err)
	out := map[string]int64{}
	for _, d := range ds {
		out[d.Bundle] = d.Revision
	}
	return out
}

func testBundles(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "tok", 0, time.Hour, false)
	_, err := register(s, "tok", "prod-1", "c1", map[string]string{"env": "prod"}, false)
	must(t, err)
	_, err = register(s, "tok", "dev-1", "c2", map[string]string{"env": "dev"}, false)
	must(t, err)
	epoch0, err := s.ConfigEpoch(ctx)
	must(t, err)

	r1, created, selected, err := s.CreateRevision(ctx, revision("base", "a: 1\n", `{"env":"prod"}`), "desc", false, matchAll)
	must(t, err)
	if !created || r1.Revision != 1 || len(selected) != 1 || selected[0] != "prod-1" {
		t.Fatalf("first revision: %+v created=%v selected=%v", r1, created, selected)
	}
	if epoch, _ := s.ConfigEpoch(ctx); epoch <= epoch0 {
		t.Fatalf("config epoch did not move: %d → %d", epoch0, epoch)
	}
	// The same content again creates nothing.
	same, created, _, err := s.CreateRevision(ctx, revision("base", "a: 1\n", `{"env":"prod"}`), "desc", false, matchAll)
	must(t, err)
	if created || same.Revision != 1 {
		t.Fatalf("identical upload: %+v created=%v", same, created)
	}
	r2, created, _, err := s.CreateRevision(ctx, revision("base", "a: 2\n", `{}`), "desc 2", false, matchAll)
	must(t, err)
	if !created || r2.Revision != 2 {
		t.Fatalf("second revision: %+v", r2)
	}
	if d := desiredOf(t, s, "dev-1"); d["base"] != 2 {
		t.Fatalf("dev-1 desired after selector widened: %v", d)
	}
	// Narrowing the selector takes the bundle away from dev-1.
	_, _, _, err = s.CreateRevision(ctx, revision("base", "a: 3\n", `{"env":"prod"}`), "", false, matchAll)
	must(t, err)
	if d := desiredOf(t, s, "dev-1"); len(d) != 0 {
		t.Fatalf("dev-1 still has %v", d)
	}
	// A cluster joining later gets what its labels select.
	_, err = register(s, "tok", "prod-2", "c3", map[string]string{"env": "prod"}, false)
	must(t, err)
	if d := desiredOf(t, s, "prod-2"); d["base"] != 3 {
		t.Fatalf("late joiner desired: %v", d)
	}
	// Relabelling re-selects: dev-1 becomes prod and gets base, then dev again and loses it.
	must(t, s.SetClusterLabels(ctx, "dev-1", map[string]string{"env": "prod"}, matchAll))
	if d := desiredOf(t, s, "dev-1"); d["base"] != 3 {
		t.Fatalf("dev-1 after relabelling: %v", d)
	}
	must(t, s.SetClusterLabels(ctx, "dev-1", map[string]string{"env": "dev"}, matchAll))
	if d := desiredOf(t, s, "dev-1"); len(d) != 0 {
		t.Fatalf("dev-1 after relabelling back: %v", d)
	}
	if c, _ := s.GetCluster(ctx, "dev-1"); c.Labels["env"] != "dev" {
		t.Fatalf("labels: %v", c.Labels)
	}
	if err := s.SetClusterLabels(ctx, "nope", nil, matchAll); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("relabelling unknown cluster: %v", err)
	}
	// Rollout primitive: move one cluster back to revision 1.
	must(t, s.SetDesiredRevision(ctx, "base", 1, []string{"prod-2"}))
	if d := desiredOf(t, s, "prod-2"); d["base"] != 1 {
		t.Fatalf("after SetDesiredRevision: %v", d)
	}
	if err := s.SetDesiredRevision(ctx, "base", 99, []string{"prod-2"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown revision: %v", err)
	}

	revs, err := s.ListRevisions(ctx, "base")
	must(t, err)
	if len(revs) != 3 || revs[0].Revision != 3 || revs[0].Manifests != "" || revs[2].CreatedBy != "token:ci" {
		t.Fatalf("revisions: %+v", revs)
	}
	latest, err := s.GetRevision(ctx, "base", 0)
	must(t, err)
	if latest.Revision != 3 || latest.Manifests != "a: 3\n" {
		t.Fatalf("latest: %+v", latest)
	}
	first, err := s.GetRevision(ctx, "base", 1)
	must(t, err)
	if first.Manifests != "a: 1\n" || !first.CreatedAt.Equal(t0) {
		t.Fatalf("revision 1: %+v", first)
	}
	b, err := s.GetBundle(ctx, "base")
	must(t, err)
	if b.LatestRevision != 3 || b.Selector != `{"env":"prod"}` {
		t.Fatalf("bundle: %+v", b)
	}

	must(t, s.DeleteCluster(ctx, "prod-1"))
	if _, err := s.GetCluster(ctx, "prod-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted cluster: %v", err)
	}
	if d := desiredOf(t, s, "prod-1"); len(d) != 0 {
		t.Fatalf("desired of a deleted cluster: %v", d)
	}
	if err := s.DeleteCluster(ctx, "prod-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting twice: %v", err)
	}
	must(t, s.DeleteBundle(ctx, "base"))
	if all, _ := s.Desired(ctx, ""); len(all) != 0 {
		t.Fatalf("desired after delete: %+v", all)
	}
	if _, err := s.GetBundle(ctx, "base"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted bundle: %v", err)
	}
	if bs, _ := s.ListBundles(ctx); len(bs) != 0 {
		t.Fatalf("bundles after delete: %+v", bs)
	}
	// Re-creating continues the numbering; history stays.
	r4, _, _, err := s.CreateRevision(ctx, revision("base", "a: 3\n", `{"env":"prod"}`), "", false, matchAll)
	must(t, err)
	if r4.Revision != 4 {
		t.Fatalf("revision after re-create: %d", r4.Revision)
	}
	if err := s.DeleteBundle(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting unknown bundle: %v", err)
	}
}

func testHeartbeat(t *testing.T, s store.Store) {
	ctx := context.Background()
	bootstrap(t, s, "tok", 0, time.Hour, false)
	_, err := register(s, "tok", "alpha", "c1", map[string]string{}, false)
	must(t, err)
	_, _, _, err = s.CreateRevision(ctx, revision("base", "x", `{}`), "", false, matchAll)
	must(t, err)
	at := t0.Add(time.Hour)
	must(t, s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: at, AgentVersion: "v2",
		KubernetesVersion: "v1.38.0", AppliedDigest: "sha256:x", Applied: map[string]int64{"base": 1, "gone": 7},
		Status: `{"agentVersion":"v2"}`}))
	c, err := s.GetCluster(ctx, "alpha")
	must(t, err)
	if !c.LastHeartbeat.Equal(at) || c.AgentVersion != "v2" || c.KubernetesVersion != "v1.38.0" ||
		c.AppliedDigest != "sha256:x" || c.Status != `{"agentVersion":"v2"}` {
		t.Fatalf("after heartbeat: %+v", c)
	}
	ds, err := s.Desired(ctx, "alpha")
	must(t, err)
	if len(ds) != 1 || ds[0].AppliedRevision != 1 || ds[0].Revision != 1 {
		t.Fatalf("desired after heartbeat: %+v", ds)
	}
	if err := s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "nope", At: at}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("heartbeat of unknown cluster: %v", err)
	}
	// Desired bundles written anew (the bundle deleted and created again) start at applied
	// revision 0; the agent's next heartbeat sets them even though its applied configuration,
	// and so its digest, did not change (a store may skip reading them while it does not).
	must(t, s.DeleteBundle(ctx, "base"))
	_, _, _, err = s.CreateRevision(ctx, revision("base", "y", `{}`), "", false, matchAll)
	must(t, err)
	if ds, _ := s.Desired(ctx, "alpha"); len(ds) != 1 || ds[0].AppliedRevision != 0 || ds[0].Revision != 2 {
		t.Fatalf("desired after the bundle was created again: %+v", ds)
	}
	must(t, s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: at.Add(time.Minute), AgentVersion: "v2",
		KubernetesVersion: "v1.38.0", AppliedDigest: "sha256:x", Applied: map[string]int64{"base": 1}, Status: `{}`}))
	if ds, _ := s.Desired(ctx, "alpha"); len(ds) != 1 || ds[0].AppliedRevision != 1 || ds[0].Revision != 2 {
		t.Fatalf("desired after a heartbeat with the same applied digest: %+v", ds)
	}
	// A desired bundle the agent no longer reports is applied at revision 0.
	must(t, s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: "alpha", At: at.Add(2 * time.Minute), AgentVersion: "v2",
		KubernetesVersion: "v1.38.0", AppliedDigest: "sha256:none", Applied: map[string]int64{}, Status: `{}`}))
	if ds, _ := s.Desired(ctx, "alpha"); len(ds) != 1 || ds[0].AppliedRevision != 0 {
		t.Fatalf("desired after a heartbeat that reports no bundle: %+v", ds)
	}
}

func testAudit(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i := range 5 {
		must(t, s.AppendAudit(ctx, store.AuditEvent{Time: t0.Add(time.Duration(i) * time.Second),
			Actor: "token:admin", Action: "ApplyBundle", Target: fmt.Sprintf("bundle/b@%d", i), Detail: "d"}))
	}
	page, err := s.ListAudit(ctx, 0, 3)
	must(t, err)
	if len(page) != 3 || page[0].Target != "bundle/b@4" || page[2].Target != "bundle/b@2" {
		t.Fatalf("first page: %+v", page)
	}
	rest, err := s.ListAudit(ctx, page[2].ID, 10)
	must(t, err)
	if len(rest) != 2 || rest[0].Target != "bundle/b@1" || !rest[1].Time.Equal(t0) {
		t.Fatalf("second page: %+v", rest)
	}
}
