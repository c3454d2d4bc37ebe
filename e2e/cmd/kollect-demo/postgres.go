package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

// fleetQuery is the cross-cluster query the demo runs, a file the newcomer can rerun and extend.
const fleetQuery = "docs/examples/demo-fleet.sql"

// fleetDB is the PostgreSQL both clusters export to: testenv's throwaway server (the one the
// sink tests start, on 127.0.0.1 with loopback trusted), holding the database inventory owned
// by the role kollect_agent that the agents connect as.
type fleetDB struct {
	*testenv.Postgres
	// URL connects as kollect_agent to inventory.
	URL string
}

func startPostgres(ctx context.Context) (*fleetDB, error) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		return nil, err
	}
	// One -c per statement: CREATE DATABASE may not run inside a transaction block.
	out, err := exec.CommandContext(ctx, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", pg.URL,
		"-c", "CREATE ROLE kollect_agent LOGIN", "-c", "CREATE DATABASE inventory OWNER kollect_agent").CombinedOutput()
	if err != nil {
		pg.Shutdown()
		return nil, fmt.Errorf("creating the database inventory: %v: %s", err, out)
	}
	return &fleetDB{Postgres: pg, URL: fmt.Sprintf("postgres://kollect_agent@127.0.0.1:%d/inventory", pg.Port)}, nil
}

// createCredentials creates the Secret the sink demo-pg names, in one cluster: credentials
// never travel in a hub bundle. The label lets sinks the hub delivered read it.
func createCredentials(ctx context.Context, cp *testenv.ControlPlane) error {
	return cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kollect-demo", Name: "pg-credentials",
		Labels: map[string]string{kollectv1.LabelHubSinks: kollectv1.HubSinksAllowed}},
		StringData: map[string]string{"username": "kollect_agent"}})
}

// pointAt sets the port of the bundle's postgres sink to the server's.
func (db *fleetDB) pointAt(bundle string) (string, error) {
	const placeholder = "port: 5432"
	if strings.Count(bundle, placeholder) != 1 {
		return "", fmt.Errorf("%s: want exactly one %q to replace with the demo's port", "docs/examples/demo.yaml", placeholder)
	}
	return strings.Replace(bundle, placeholder, "port: "+strconv.Itoa(db.Port), 1), nil
}

// waitClusters waits until n clusters hold a state row, that is, have exported once.
func (db *fleetDB) waitClusters(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		out, err := exec.CommandContext(ctx, "psql", "-X", "-At", db.URL, "-c",
			"SELECT count(DISTINCT cluster) FROM kollect.rows_state").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == strconv.Itoa(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d clusters in PostgreSQL after %s, want %d: %v %s", countOr(out), timeout, n, err, out)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func countOr(out []byte) int {
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

// query runs the fleet query with psql, printing the command as the newcomer would type it.
func (db *fleetDB) query(ctx context.Context) error {
	fmt.Println("$ psql " + db.URL + " -f " + fleetQuery)
	cmd := exec.CommandContext(ctx, "psql", db.URL, "-f", fleetQuery)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}
