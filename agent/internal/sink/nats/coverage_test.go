package nats

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/api/v1alpha1"
	"kollect.dev/testenv"
)

func coverage(states ...v1alpha1.CoverageState) []export.Coverage {
	targets := []string{"ns/deploys", "pods"}
	var out []export.Coverage
	for i, st := range states {
		c := export.Coverage{Target: targets[i], State: st, Rows: 1}
		if st != v1alpha1.CoverageComplete {
			c.Reason = "deployments.apps is forbidden: cannot list"
		}
		out = append(out, c)
	}
	return out
}

// oneStateMessageAdded fails unless the stream holds exactly one message more than before,
// the state message of c1/pods as its last, and the bucket's stream none more.
func oneStateMessageAdded(t *testing.T, c *client, stream, bucket string, before, kvBefore uint64) {
	t.Helper()
	if after := c.count(t, stream); after != before+1 {
		t.Fatalf("the stream went from %d to %d messages, want one more", before, after)
	}
	all := c.allMessages(t, stream)
	if last := all[len(all)-1]; last.Subject != stream+".c1.pods._state" || last.Header.Get(hEvent) != evState {
		t.Fatalf("the message added is %d on %s, not the state message", last.Sequence, last.Subject)
	}
	if kv := c.count(t, "KV_"+bucket); kv != kvBefore {
		t.Fatalf("the bucket went from %d to %d messages", kvBefore, kv)
	}
}

// TestCoverageInTheStateMessage, against nats-server with JetStream: the state message
// carries the batch's coverage; a batch whose only change is the coverage (same checksum, empty
// diff) adds exactly one message to the stream, the state message with the new coverage and
// the exportedAt of the last change, and no event nor bucket entry; the same batch again adds
// none; a restarted sink's coverage-only batch (a full diff, as the agent sends after a
// restart) adds only the state message too; confirmations, also from a restarted sink and
// naming no coverage, keep the coverage.
func TestCoverageInTheStateMessage(t *testing.T) {
	ctx := t.Context()
	const stream, bucket = "COVERAGE", "coverage"
	sk := newSink(t, spec(server.URL, stream, bucket), defaultEnv)
	var ex exporter
	snap := export.NewSnapshot([]export.Row{row("a", 1), row("b", 1)})
	complete := coverage(v1alpha1.CoverageComplete, v1alpha1.CoverageComplete)
	b := ex.Batch(snap)
	b.Envelope.Coverage = complete
	if err := sk.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	ex.Accepted = snap
	c := dial(t, server.URL)
	states := c.states(t, stream)
	if len(states) != 1 || !reflect.DeepEqual(states[0].Coverage, complete) {
		t.Fatalf("after an export the state messages are %+v, want one with coverage %+v", states, complete)
	}
	first := states[0]
	events := len(c.messages(t, stream))

	forbidden := coverage(v1alpha1.CoverageForbidden, v1alpha1.CoverageComplete)
	before, kv := c.count(t, stream), c.count(t, "KV_"+bucket)
	b = ex.Batch(snap)
	b.Envelope.Coverage = forbidden
	if !b.Diff.Empty() || b.PreviousChecksum != snap.Checksum {
		t.Fatalf("not a coverage-only batch: %+v", b.Diff)
	}
	if err := sk.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	oneStateMessageAdded(t, c, stream, bucket, before, kv)
	now := c.states(t, stream)[1]
	if !reflect.DeepEqual(now.Coverage, forbidden) || now.Checksum != snap.Checksum || now.Rows != 2 ||
		!now.ExportedAt.Equal(first.ExportedAt) || !now.ConfirmedAt.Equal(first.ConfirmedAt) { // a forbidden target is not confirmed current
		t.Fatalf("state after the coverage change: %+v (first %+v)", now, first)
	}
	if n := len(c.messages(t, stream)); n != events {
		t.Fatalf("a coverage-only batch published events: %d → %d", events, n)
	}

	before = c.count(t, stream)
	b = ex.Batch(snap)
	b.Envelope.Coverage = forbidden
	if err := sk.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	if after := c.count(t, stream); after != before {
		t.Fatalf("an export of unchanged rows and coverage published: %d → %d messages", before, after)
	}

	// A restarted agent knows the checksum from its status but not the rows: a full batch.
	restarted := newSink(t, spec(server.URL, stream, bucket), defaultEnv)
	fresh := exporter{Gen: ex.Gen}
	b = fresh.Batch(snap)
	b.PreviousChecksum = snap.Checksum
	b.Envelope.Coverage = complete
	if !b.Diff.Full {
		t.Fatal("a batch without a baseline is not full")
	}
	before = c.count(t, stream)
	if err := restarted.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	oneStateMessageAdded(t, c, stream, bucket, before, kv)
	states = c.states(t, stream)
	if now := states[len(states)-1]; !reflect.DeepEqual(now.Coverage, complete) || !now.ExportedAt.Equal(first.ExportedAt) {
		t.Fatalf("state after the restarted sink's coverage change: %+v", now)
	}

	for i, s := range []*Sink{sk, newSink(t, spec(server.URL, stream, bucket), defaultEnv)} {
		before, kv = c.count(t, stream), c.count(t, "KV_"+bucket)
		at := time.Unix(1_900_000_000+int64(i), 0).UTC()
		if err := s.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: snap.Checksum, At: at}); err != nil {
			t.Fatal(err)
		}
		oneStateMessageAdded(t, c, stream, bucket, before, kv)
		states = c.states(t, stream)
		if now := states[len(states)-1]; !reflect.DeepEqual(now.Coverage, complete) || !now.ConfirmedAt.Equal(at) {
			t.Fatalf("state after a confirmation: %+v, want coverage %+v", now, complete)
		}
	}
}

// TestDocCoverageCommandRuns runs the nats CLI command of docs/sinks/nats.md that lists the
// complete targets of a cluster, against nats-server holding the state of two clusters and
// two inventories, after a coverage-only change: it prints the complete targets of that
// cluster, from the last state message of each inventory.
func TestDocCoverageCommandRuns(t *testing.T) {
	ctx := t.Context()
	const stream = "COVDOC"
	raw, err := os.ReadFile("../../../../docs/sinks/nats.md")
	if err != nil {
		t.Fatal(err)
	}
	var command string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(raw), -1) {
		if strings.Contains(block[1], `"complete"`) {
			command = block[1]
		}
	}
	if command == "" {
		t.Fatal("docs/sinks/nats.md has no sh block listing complete targets")
	}
	command = strings.NewReplacer("KOLLECT", stream, "kollect.prod-eu-1.", stream+".c1.").Replace(command)
	cli, err := testenv.ServerBinary("nats")
	if err != nil {
		t.Fatal(err)
	}

	sk := newSink(t, spec(server.URL, stream, ""), defaultEnv)
	snap := export.NewSnapshot([]export.Row{row("a", 1)})
	exports := []struct {
		cluster, inventory string
		coverage           []export.Coverage
	}{
		{"c1", "pods", coverage(v1alpha1.CoverageComplete, v1alpha1.CoverageComplete)},
		{"c1", "apps", coverage(v1alpha1.CoverageComplete, v1alpha1.CoverageSyncing)},
		{"c2", "pods", coverage(v1alpha1.CoverageComplete, v1alpha1.CoverageComplete)},
		// The coverage-only change: c1/pods's ns/deploys turns forbidden.
		{"c1", "pods", coverage(v1alpha1.CoverageForbidden, v1alpha1.CoverageComplete)},
	}
	exs := map[string]*exporter{}
	for _, e := range exports {
		ex := exs[e.cluster+"/"+e.inventory]
		if ex == nil {
			ex = &exporter{Cluster: e.cluster, Inventory: e.inventory}
			exs[e.cluster+"/"+e.inventory] = ex
		}
		b := ex.Batch(snap)
		b.Envelope.Coverage = e.coverage
		if err := sk.Export(ctx, b); err != nil {
			t.Fatal(err)
		}
		ex.Accepted = snap
	}
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", command)
	cmd.Env = append(os.Environ(), "NATS_URL="+server.URL, "PATH="+filepath.Dir(cli)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+t.TempDir()) // no nats CLI context of the machine's user
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("documented command fails: %v: %s\n%s", err, out, command)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	slices.Sort(lines)
	if want := []string{"apps ns/deploys", "pods pods"}; !slices.Equal(lines, want) {
		t.Fatalf("documented command prints %q, want %q\n%s", lines, want, command)
	}
}
