package sinks

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/e2e/internal/grant"
	"kollect.dev/testenv"
)

// controlPlane starts a control plane named name into *cp, stopped when the test ends: one
// of the starts a test runs in parallel.
func controlPlane(t *testing.T, name string, cp **testenv.ControlPlane) func() error {
	return func() (err error) {
		if *cp, err = testenv.Start(name, testenv.Options{}); err == nil {
			c := *cp
			t.Cleanup(func() { _ = testenv.StopAll([]*testenv.ControlPlane{c}) })
		}
		return err
	}
}

// postgresServer starts a PostgreSQL into *pg, stopped when the test ends.
func postgresServer(t *testing.T, pg **testenv.Postgres) func() error {
	return func() (err error) {
		if *pg, err = testenv.StartPostgres(); err == nil {
			t.Cleanup((*pg).Stop)
		}
		return err
	}
}

// unverifiedGrant lets the sinks of namespace ns reach the test PostgreSQL, which serves no
// TLS (sslMode disable needs allowInsecureSkipVerify).
func unverifiedGrant(ns string) string { return grant.Unverified("unverified-"+ns, ns) }

// postgresCluster is the setup of the tests that export one cluster into PostgreSQL: a control
// plane and a PostgreSQL started together, the workloads seeded, the profiles and targets of
// kollectConfig and the postgres sink applied. The inventory and the agent are the test's.
func postgresCluster(t *testing.T, ctx context.Context, name string) (*testenv.ControlPlane, string, *sinkUnderTest) {
	t.Helper()
	var (
		cp *testenv.ControlPlane
		pg *testenv.Postgres
	)
	must(t, parallel(controlPlane(t, name, &cp), postgresServer(t, &pg)))
	pgURL, err := pg.CreateDatabase(ctx, pgDatabase)
	must(t, err)
	c := cp.Client
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sinkNS}}))
	must(t, seedWorkloads(ctx, c))
	must(t, applyYAML(ctx, c, kollectConfig))
	pgs := postgresSink(pg, pgURL)
	must(t, applyYAML(ctx, c, pgs.manifest))
	return cp, pgURL, pgs
}
