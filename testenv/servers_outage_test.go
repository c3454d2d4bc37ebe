package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// outage halts p, checks that addr refuses connections (what a client sees of a stopped
// server), and resumes it.
func outage(t *testing.T, p *Process, addr string) {
	t.Helper()
	if err := p.Halt(); err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("%s accepts connections on %s after Halt", p.Name, addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%s halted: dialing %s failed with %v, want connection refused", p.Name, addr, err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if strings.Count(p.Log(), "\n") <= strings.Count(p.RunLog(), "\n") {
		t.Errorf("%s: the resumed run's log does not follow the first run's:\n%s", p.Name, p.Log())
	}
}

func cli(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestPostgresHaltAndResumeKeepData(t *testing.T) {
	pg, err := StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	cli(t, "psql", pg.URL, "-v", "ON_ERROR_STOP=1", "-qc", "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before')")
	// A session left open, as a sink's connection pool leaves it: Halt must not wait for it.
	idle := exec.Command("psql", pg.URL, "-qc", "SELECT pg_sleep(300)")
	if err := idle.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = idle.Process.Kill(); _ = idle.Wait() }()
	// The session is open once the server lists it, not after a sleep: otherwise a slow start
	// of psql leaves Halt nothing to wait for and the test proves nothing.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := cli(t, "psql", pg.URL, "-tAc", "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(300)%'")
		if n == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle session never showed in pg_stat_activity (%s sessions)", n)
		}
	}
	began := time.Now()
	outage(t, pg.Process, "127.0.0.1:"+strconv.Itoa(pg.Port))
	t.Logf("postgres halted and resumed in %s", time.Since(began).Round(time.Millisecond))
	if got := cli(t, "psql", pg.URL, "-tAc", "SELECT string_agg(v, ',') FROM kept"); got != "before" {
		t.Fatalf("after Resume the table holds %q, want %q", got, "before")
	}
}

func TestKafkaHaltAndResumeKeepRecords(t *testing.T) {
	k, err := StartKafka(KafkaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	produce := exec.Command("kcat", "-P", "-b", k.Addr, "-t", "kept", "-k", "k1", "-p", "0")
	produce.Stdin = strings.NewReader("before\n")
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v: %s", err, out)
	}
	outage(t, k.Process, k.Addr)
	// kfake writes its log on close and reloads it at start (-data-dir).
	if got := cli(t, "kcat", "-C", "-b", k.Addr, "-t", "kept", "-e", "-q", "-f", "%k=%s %o\n"); got != "k1=before 0" {
		t.Fatalf("after Resume the topic holds %q, want %q", got, "k1=before 0")
	}
	produce = exec.Command("kcat", "-P", "-b", k.Addr, "-t", "kept", "-k", "k1", "-p", "0")
	produce.Stdin = strings.NewReader("after\n")
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P after Resume: %v: %s", err, out)
	}
	got := cli(t, "kcat", "-C", "-b", k.Addr, "-t", "kept", "-p", "0", "-e", "-q", "-f", "%s@%o\n")
	if got != "before@0\nafter@1" {
		t.Fatalf("after Resume the partition holds %q: offsets must continue where they were", got)
	}
}

func TestNATSHaltAndResumeKeepStreams(t *testing.T) {
	n, err := StartNATS(NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	natsCLI, err := ServerBinary("nats")
	if err != nil {
		t.Fatal(err)
	}
	nats := func(args ...string) string { return cli(t, natsCLI, append([]string{"--server", n.URL}, args...)...) }
	nats("stream", "add", "KEPT", "--subjects", "kept.>", "--storage", "file", "--defaults")
	nats("pub", "kept.one", "before", "--jetstream")
	outage(t, n.Process, strings.TrimPrefix(n.URL, "nats://"))
	var msg struct{ Data []byte }
	if raw := nats("stream", "get", "KEPT", "1", "--json"); json.Unmarshal([]byte(raw), &msg) != nil || string(msg.Data) != "before" {
		t.Fatalf("after Resume message 1 of the stream is %s, want data %q", raw, "before")
	}
}
