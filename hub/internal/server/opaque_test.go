package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"kollect.dev/hub/internal/server"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// TestInternalErrorsReachCallersAsAnID: the hub's database goes away under it. An admin's
// call, an anonymous registration and /readyz then fail without the store's error text (which
// names the database and the server's address); callers get an id, which the hub's log holds
// with the cause.
func TestInternalErrorsReachCallersAsAnID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, err := pg.CreateDatabase(ctx, "hub_opaque")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	h := startHub(t, "", func(c *server.Config) {
		c.StoreDSN = dsn
		c.Log = slog.New(slog.NewTextHandler(logs, nil))
	})
	if _, err := h.admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{})); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("psql", pg.URL, "-qc", "DROP DATABASE hub_opaque WITH (FORCE)").CombinedOutput(); err != nil {
		t.Fatalf("dropping the hub's database: %v: %s", err, out)
	}

	leaks := regexp.MustCompile(`hub_opaque|127\.0\.0\.1|does not exist|SQLSTATE|dial`)
	idOf := regexp.MustCompile(`(?:internal|unavailable): error ([0-9a-f]{12}): the hub's log has the cause`)
	for name, call := range map[string]func() error{
		"ListClusters (admin)": func() error {
			_, err := h.admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
			return err
		},
		"Register (anonymous)": func() error {
			_, err := h.registrar.Register(ctx, connect.NewRequest(&fleetv1.RegisterRequest{
				BootstrapToken: "kbt_0000000000000000000000000000000000000000", ClusterName: "intruder"}))
			return err
		},
	} {
		err := call()
		if err == nil {
			t.Fatalf("%s succeeded without a database", name)
		}
		if leaks.MatchString(err.Error()) {
			t.Errorf("%s: the caller got the store's error: %v", name, err)
		}
		m := idOf.FindStringSubmatch(err.Error())
		if m == nil {
			t.Errorf("%s: %v, want an error with an id", name, err)
			continue
		}
		if !strings.Contains(logs.String(), "id="+m[1]) {
			t.Errorf("%s: the hub's log has no entry with id %s:\n%s", name, m[1], logs.String())
		}
	}

	resp, err := h.httpClient().Get(h.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || leaks.MatchString(body.String()) {
		t.Errorf("/readyz: %d %q", resp.StatusCode, body.String())
	}
}
