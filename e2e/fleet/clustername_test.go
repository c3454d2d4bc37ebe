package fleet

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

// TestAgentWithAnotherClusterName: the shipped agent registers as its cluster and stores its
// credential; restarted with another --cluster-name it refuses to start, because the hub
// refuses a credential of one cluster reporting as another: it exits non-zero and its stderr
// names both names. Started again with its own name, the same credential works.
func TestAgentWithAnotherClusterName(t *testing.T) {
	t.Parallel() // its own control planes, hub and ports: it waits alongside the others
	ctx := context.Background()
	work := t.TempDir()
	h, admin, token := startHubWithToken(t, work, 1)
	cps, err := testenv.StartN("rename", 1, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.StopAll(cps) })
	cp := cps[0]
	// online waits for a heartbeat of cp.Name later than since.
	online := func(what string, since time.Time) time.Time {
		var last time.Time
		eventually(t, 90*time.Second, what, func() (bool, string) {
			c, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cp.Name}))
			if err != nil {
				return false, err.Error()
			}
			last = c.Msg.GetCluster().GetLastHeartbeat().AsTime()
			return c.Msg.GetCluster().GetState() == fleetv1.ClusterState_CLUSTER_STATE_ONLINE && last.After(since),
				c.Msg.GetCluster().GetState().String() + " last heartbeat " + last.String()
		})
		return last
	}

	a := startAgent(t, cp, h, token, "env=e2e")
	online("the agent registered as "+cp.Name, time.Time{})
	a.stop()
	// The hub's record of the last heartbeat before the renamed start: that start adds none.
	c, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cp.Name}))
	if err != nil {
		t.Fatal(err)
	}
	stopped := c.Msg.GetCluster().GetLastHeartbeat().AsTime()

	// The harness's flags, with a later --cluster-name: the last one wins.
	renamed := "not-" + cp.Name
	cmd := exec.Command(bins.agent, "--cluster-name", renamed, "--cluster-labels", "env=e2e",
		"--hub-url", "https://"+h.addr, "--hub-ca-fingerprint", h.fingerprint, "--pod-namespace", "kollect-system",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--cache-dir", t.TempDir(), "--allow-local-sinks")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the agent started as %s with %s's credential still runs after 90s:\n%s", renamed, cp.Name, tail(stderr.String(), 20))
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("the agent started as %s with %s's credential ended with %v, want a non-zero exit:\n%s", renamed, cp.Name, err, tail(stderr.String(), 20))
	}
	for _, want := range []string{"--cluster-name " + renamed, "issued for cluster " + cp.Name} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the agent's stderr lacks %q:\n%s", want, tail(stderr.String(), 20))
		}
	}
	if _, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: renamed})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("cluster %s on the hub: %v, want NotFound", renamed, err)
	}
	if c, err := admin.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cp.Name})); err != nil {
		t.Error(err)
	} else if last := c.Msg.GetCluster().GetLastHeartbeat().AsTime(); !last.Equal(stopped) {
		t.Errorf("the refused agent's heartbeat was recorded for %s: last heartbeat %v, was %v", cp.Name, last, stopped)
	}
	t.Logf("the refused agent's stderr ends:\n%s", tail(stderr.String(), 2))

	// Its own name again: the stored credential still works (no token use is left).
	a.start()
	online("the agent back under its own name", stopped)
}
