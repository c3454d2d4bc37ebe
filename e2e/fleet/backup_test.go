package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"kollect.dev/e2e/dashboard/fleetsim"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

// TestHubBackupRestore runs docs/hub.md's backup and restore commands against a real hub on
// each store: a backup taken while the hub runs (pg_dump; sqlite3 .backup), a cluster
// registered after it, the hub stopped, the backup restored (pg_restore --clean; the copy put
// in place of hub.db) and the hub started again. The restored hub knows the clusters of the
// backup and accepts their agents' credentials; the later cluster is gone and its credential
// refused, as the page says.
func TestHubBackupRestore(t *testing.T) {
	t.Parallel() // its own control planes, hub and ports: it waits alongside the others
	t.Run("postgres", func(t *testing.T) {
		pg, err := testenv.StartPostgres()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pg.Stop)
		dsn, err := pg.CreateDatabase(context.Background(), "hub_backup")
		if err != nil {
			t.Fatal(err)
		}
		dump := filepath.Join(t.TempDir(), "kollect-hub.dump")
		backupRestore(t, []string{"--store", dsn}, func(*hub) {
			run(t, "pg_dump", "--format=custom", "--file", dump, dsn)
		}, func(*hub) {
			run(t, "pg_restore", "--clean", "--if-exists", "--no-owner", "--dbname", dsn, dump)
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		backup := filepath.Join(t.TempDir(), "hub.db")
		backupRestore(t, nil, func(h *hub) {
			run(t, "sqlite3", filepath.Join(h.dir, "data", "hub.db"), ".backup '"+backup+"'")
		}, func(h *hub) {
			db := filepath.Join(h.dir, "data", "hub.db")
			for _, f := range []string{db + "-wal", db + "-shm"} {
				if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
			raw, err := os.ReadFile(backup)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(db, raw, 0o600); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// backupRestore registers three simulated clusters with a hub started with args, backs up,
// registers a fourth, stops the hub, restores and starts it again, then checks what it knows.
func backupRestore(t *testing.T, args []string, backup, restore func(*hub)) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	h := &hub{t: t, dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), args: args, replica: len(args) > 0}
	h.start()
	t.Cleanup(h.stop)
	admin := h.fleet(h.adminToken)
	tok, err := admin.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
		Description: "backup", Ttl: durationpb.New(time.Hour), MaxUses: 4}))
	if err != nil {
		t.Fatal(err)
	}
	sim, err := fleetsim.New(h.url(), h.caPEM, tok.Msg.GetSecret(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	add := func(name string) {
		if err := sim.Add(ctx, fleetsim.Cluster{Name: name, AgentVersion: "sim", K8sVersion: "v1.33.4"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"bk-1", "bk-2", "bk-3"} {
		add(name)
	}
	backup(h)
	add("bk-late")
	h.stop()
	restore(h)
	h.start()

	admin = h.fleet(h.adminToken)
	l, err := admin.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range l.Msg.GetClusters() {
		names = append(names, c.GetName())
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "bk-1,bk-2,bk-3" {
		t.Fatalf("the restored hub knows %v, want the backup's bk-1, bk-2, bk-3", names)
	}
	for _, name := range []string{"bk-1", "bk-2", "bk-3"} {
		if err := sim.Report(ctx, name); err != nil {
			t.Errorf("%s's credential after the restore: %v", name, err)
		}
	}
	if err := sim.Report(ctx, "bk-late"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a credential issued after the backup: %v, want Unauthenticated", err)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
