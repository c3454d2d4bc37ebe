// Command kollect-demo is what `make demo` runs: a fleet on this machine. It starts a hub
// (SQLite) and two local control planes ("east" and "west") with sample workloads in several
// namespaces (Deployments, Services, ConfigMaps, a CRD and its objects), runs one
// kollect-agent per cluster registered to the hub with a bootstrap token, applies the sample
// configuration as a bundle through the hub, and shows both clusters' rows landing in one
// shared git repository, labelled with their cluster, and in one PostgreSQL database it
// starts. It then scales a Deployment in east, shows the one-row commit that follows and one
// cross-cluster query run with psql (docs/examples/demo-fleet.sql), and runs until Ctrl-C,
// leaving nothing behind.
package main

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

//go:embed workloads.yaml
var workloads []byte

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("\n\033[1m» "+format+"\033[0m\n", args...) }

func run() error {
	// SIGHUP: the terminal went away; SIGPIPE: the output did (a Go program is otherwise killed by
	// it on its next print, before it could stop the control planes, which run in their own
	// process groups and would outlive it).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	defer stop()
	bins, err := findBinaries()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "kollect-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	step("starting the hub (SQLite store, its own CA)")
	hub, err := startHub(ctx, bins.hub, work)
	if err != nil {
		return err
	}
	defer hub.stop()

	step("starting two local control planes, east and west, with the Kollect CRDs, and PostgreSQL 15")
	// PostgreSQL starts beside the control planes: initdb takes seconds the demo need not wait.
	type started struct {
		db  *fleetDB
		err error
	}
	pgc := make(chan started, 1)
	go func() { db, err := startPostgres(ctx); pgc <- started{db, err} }()
	cps, err := testenv.StartN("demo", 2, testenv.Options{})
	pgs := <-pgc
	if pgs.db != nil {
		defer pgs.db.Shutdown()
	}
	if err != nil {
		return err
	}
	if pgs.err != nil {
		_ = testenv.StopAll(cps)
		return fmt.Errorf("starting PostgreSQL: %w", pgs.err)
	}
	db := pgs.db
	defer func() {
		step("stopping the control planes")
		_ = testenv.StopAll(cps)
	}()
	east, west := cps[0], cps[1]
	east.Name, west.Name = "east", "west"

	step("creating sample workloads in namespaces shop and payments, and a Database CRD, in both clusters")
	for _, cp := range cps {
		if err := applyYAML(ctx, cp, workloads, ""); err != nil {
			return err
		}
		if err := waitForKind(ctx, cp, "demo.kollect.dev/v1", "DatabaseList"); err != nil {
			return err
		}
	}

	step("creating the Secret pg-credentials in both clusters, labelled kollect.dev/hub-sinks=allow: the postgres sink's user (credentials never travel in a bundle; a sink the hub delivers reads only Secrets labelled for it)")
	for _, cp := range cps {
		if err := createCredentials(ctx, cp); err != nil {
			return err
		}
	}
	step("creating docs/examples/demo-grant.yaml in both clusters: the KollectClusterScope that allows the demo's plaintext PostgreSQL sink (sslMode disable)")
	grant, err := os.ReadFile("docs/examples/demo-grant.yaml")
	if err != nil {
		return err
	}
	for _, cp := range cps {
		if err := applyYAML(ctx, cp, grant, ""); err != nil {
			return fmt.Errorf("cluster %s: %w", cp.Name, err)
		}
	}

	step("creating a bootstrap token and starting one kollect-agent per cluster, registered to the hub")
	token, err := hub.bootstrapToken(ctx, 2)
	if err != nil {
		return err
	}
	for _, cp := range cps {
		a, err := startAgent(ctx, bins.agent, cp, hub, token, work)
		if err != nil {
			return err
		}
		defer a.stop()
	}

	if err := hub.waitClusters(ctx, len(cps), 60*time.Second); err != nil {
		return err
	}

	repo, err := testenv.InitBareRepo(filepath.Join(work, "inventory.git"))
	if err != nil {
		return err
	}
	config, err := os.ReadFile("docs/examples/demo.yaml")
	if err != nil {
		return err
	}
	bundle, err := db.pointAt(strings.ReplaceAll(string(config), "file:///tmp/kollect-demo.git", "file://"+repo))
	if err != nil {
		return err
	}
	step("applying docs/examples/demo.yaml as bundle \"inventory\" through the hub, for clusters with env=demo")
	if err := hub.applyBundle(ctx, "inventory", bundle, map[string]string{"env": "demo"}); err != nil {
		return err
	}

	invKey := client.ObjectKey{Name: "fleet"}
	for _, cp := range cps {
		if err := waitSynced(ctx, cp, invKey, 120*time.Second); err != nil {
			return fmt.Errorf("cluster %s: %w", cp.Name, err)
		}
		if err := waitTargetsReady(ctx, cp, 30*time.Second); err != nil {
			return fmt.Errorf("cluster %s: %w", cp.Name, err)
		}
	}
	step("the hub's view of the fleet")
	if err := hub.printClusters(ctx); err != nil {
		return err
	}
	step("what the agent applied in east")
	kubectl(ctx, east, "get", "kollect", "-A")

	step("the shared repository holds each cluster's documents under its own name:")
	clone := filepath.Join(work, "clone")
	if err := git("", "clone", "-q", repo, clone); err != nil {
		return err
	}
	_ = git(clone, "ls-files")
	_ = git(clone, "--no-pager", "show", "HEAD:east/fleet/Deployment.yaml")

	step("scaling shop/cart in east to 5 replicas: the next commit changes exactly that row")
	d := &appsv1.Deployment{}
	if err := east.Client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "cart"}, d); err != nil {
		return err
	}
	inv := &kollectv1.KollectClusterInventory{}
	if err := east.Client.Get(ctx, invKey, inv); err != nil {
		return err
	}
	d.Spec.Replicas = ptr(int32(5))
	if err := east.Client.Update(ctx, d); err != nil {
		return err
	}
	if err := waitChecksumChange(ctx, east, invKey, inv.Status.Checksum, 60*time.Second); err != nil {
		return err
	}
	_ = git(clone, "pull", "-q")
	_ = git(clone, "--no-pager", "log", "-1", "-p", "--stat", "--", "east")

	step("the same rows in PostgreSQL: one query across both clusters, rows and how long ago each agent confirmed them")
	if err := db.waitClusters(ctx, len(cps), 30*time.Second); err != nil {
		return err
	}
	if err := db.query(ctx); err != nil {
		return err
	}

	fmt.Printf("\nhub:          https://%s (CA %s)\nadmin token:  %s\nkubeconfigs:  %s  %s\n",
		hub.addr, hub.fingerprint, hub.adminToken, east.Kubeconfig, west.Kubeconfig)
	fmt.Printf("postgres:     psql %s -f %s\n", db.URL, fleetQuery)
	fmt.Printf("dashboard:    https://%s/ (sign in with the admin token; the browser will not know the hub's own CA)\n", hub.addr)
	fmt.Printf("try:          bin/kollect hub login --url https://%s --token %s --ca-fingerprint %s && bin/kollect hub clusters\n",
		hub.addr, hub.adminToken, hub.fingerprint)
	if os.Getenv("KOLLECT_DEMO_EXIT") != "" {
		return nil
	}
	fmt.Println("The agents keep exporting; edit workloads with kubectl and watch the repository. Press Ctrl-C to stop.")
	<-ctx.Done()
	return nil
}

func ptr[T any](v T) *T { return &v }
