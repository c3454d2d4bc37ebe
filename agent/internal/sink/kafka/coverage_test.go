package kafka

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/api/v1alpha1"
)

// partitionEnds is the topic's end offset per partition.
func partitionEnds(t testing.TB, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// oneRecordAdded fails unless exactly one partition grew, by one record, and that record is
// the state record of c1/pods (the last one kcat reads under its key).
func oneRecordAdded(t *testing.T, topic string, before map[int32]int64) {
	t.Helper()
	after := partitionEnds(t, topic)
	var grown []int32
	for p, end := range after {
		if end != before[p] {
			grown = append(grown, p)
		}
	}
	if len(grown) != 1 || after[grown[0]] != before[grown[0]]+1 {
		t.Fatalf("end offsets %v → %v, want exactly one record more", before, after)
	}
	msgs := kcatAll(t, broker.Addr, topic)[stateKey("c1", "pods")]
	last := msgs[len(msgs)-1]
	if int32(last.Partition) != grown[0] || last.Offset != before[grown[0]] || last.header(hEvent) != evState {
		t.Fatalf("the record added at %d/%d is not the state record (last state record %d/%d)", grown[0], before[grown[0]],
			last.Partition, last.Offset)
	}
}

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

// TestCoverageInTheStateRecord, against kfake (a stand-in for Kafka): the state record carries
// the batch's coverage; a batch whose only change is the coverage (same checksum, empty diff)
// adds exactly one record to the topic, the state record with the new coverage and the
// exportedAt of the last change; the same batch again adds none; a restarted sink's
// coverage-only batch (a full diff, as the agent sends after a restart) adds only the state
// record too; a confirmation, also from a restarted sink and naming no coverage, keeps the
// coverage.
func TestCoverageInTheStateRecord(t *testing.T) {
	ctx := t.Context()
	const topic = "coverage"
	sk := newSink(t, spec(broker.Addr, topic), sink.Env{})
	var ex exporter
	snap := export.NewSnapshot([]export.Row{row("a", 1), row("b", 1)})
	complete := coverage(v1alpha1.CoverageComplete, v1alpha1.CoverageComplete)
	b := ex.Batch(snap)
	b.Envelope.Coverage = complete
	if err := sk.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	ex.Accepted = snap
	states := stateRecords(t, topic)
	if len(states) != 1 || !reflect.DeepEqual(states[0].Coverage, complete) {
		t.Fatalf("after an export the state records are %+v, want one with coverage %+v", states, complete)
	}
	first := states[0]
	rowsBefore := kcat(t, broker.Addr, topic)

	// A target turns forbidden: its rows are kept, the checksum stays, only coverage changes.
	forbidden := coverage(v1alpha1.CoverageForbidden, v1alpha1.CoverageComplete)
	before := partitionEnds(t, topic)
	b = ex.Batch(snap)
	b.Envelope.Coverage = forbidden
	if !b.Diff.Empty() || b.PreviousChecksum != snap.Checksum {
		t.Fatalf("not a coverage-only batch: %+v", b.Diff)
	}
	if err := sk.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	oneRecordAdded(t, topic, before)
	now := stateRecords(t, topic)[1]
	if !reflect.DeepEqual(now.Coverage, forbidden) || now.Checksum != snap.Checksum || now.Rows != 2 ||
		!now.ExportedAt.Equal(first.ExportedAt) || !now.ConfirmedAt.Equal(first.ConfirmedAt) { // a forbidden target is not confirmed current
		t.Fatalf("state record after the coverage change: %+v (first %+v)", now, first)
	}
	if got := kcat(t, broker.Addr, topic); !reflect.DeepEqual(got, rowsBefore) {
		t.Fatalf("a coverage-only batch produced row records:\n%v\n→ %v", rowsBefore, got)
	}

	// The same checksum and coverage again: nothing.
	before = partitionEnds(t, topic)
	b = ex.Batch(snap)
	b.Envelope.Coverage = forbidden
	if err := sk.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	if after := partitionEnds(t, topic); !maps.Equal(after, before) {
		t.Fatalf("an export of unchanged rows and coverage produced records: %v → %v", before, after)
	}

	// A restarted agent knows the checksum from its status but not the rows: its batch is
	// full. The topic's state names the checksum, so only the state record is produced.
	restarted := newSink(t, spec(broker.Addr, topic), sink.Env{})
	fresh := exporter{Gen: ex.Gen}
	b = fresh.Batch(snap)
	b.PreviousChecksum = snap.Checksum
	b.Envelope.Coverage = complete
	if !b.Diff.Full {
		t.Fatal("a batch without a baseline is not full")
	}
	before = partitionEnds(t, topic)
	if err := restarted.Export(ctx, b); err != nil {
		t.Fatal(err)
	}
	oneRecordAdded(t, topic, before)
	states = stateRecords(t, topic)
	if now := states[len(states)-1]; !reflect.DeepEqual(now.Coverage, complete) || !now.ExportedAt.Equal(first.ExportedAt) {
		t.Fatalf("state record after the restarted sink's coverage change: %+v", now)
	}

	// A confirmation rewrites the record read back: the coverage stays, whoever confirms.
	for _, c := range []*Sink{sk, newSink(t, spec(broker.Addr, topic), sink.Env{})} {
		before = partitionEnds(t, topic)
		at := time.Unix(1_900_000_000, 0).UTC()
		if err := c.Confirm(ctx, sink.Confirmation{Cluster: "c1", Inventory: "pods", Checksum: snap.Checksum, At: at}); err != nil {
			t.Fatal(err)
		}
		oneRecordAdded(t, topic, before)
		states = stateRecords(t, topic)
		if now := states[len(states)-1]; !reflect.DeepEqual(now.Coverage, complete) || !now.ConfirmedAt.Equal(at) {
			t.Fatalf("state record after a confirmation: %+v, want coverage %+v", now, complete)
		}
	}
}

// TestDocCoverageCommandRuns runs the kcat command of docs/sinks/kafka.md that lists the
// complete targets of a cluster, against kfake (a stand-in for Kafka) holding state records
// of two clusters and two inventories, after a coverage-only change: it prints the complete
// targets of that cluster, from the latest state records only.
func TestDocCoverageCommandRuns(t *testing.T) {
	ctx := t.Context()
	const topic = "doc-coverage"
	raw, err := os.ReadFile("../../../../docs/sinks/kafka.md")
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
		t.Fatal("docs/sinks/kafka.md has no sh block listing complete targets")
	}
	command = strings.NewReplacer("kafka-0.kafka.messaging:9093", broker.Addr, "kollect.rows", topic, "prod-eu-1", "c1").Replace(command)

	sk := newSink(t, spec(broker.Addr, topic), sink.Env{})
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
	out, err := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", command).CombinedOutput()
	if err != nil {
		t.Fatalf("documented command fails: %v: %s\n%s", err, out, command)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	slices.Sort(lines)
	if want := []string{"apps ns/deploys", "pods pods"}; !slices.Equal(lines, want) {
		t.Fatalf("documented command prints %q, want %q", lines, want)
	}
	// The state records are JSON a consumer decodes as export.StateRecord.
	msgs := kcatAll(t, broker.Addr, topic)[stateKey("c1", "pods")]
	var rec stateRecord
	if err := json.Unmarshal([]byte(*msgs[len(msgs)-1].Payload), &rec); err != nil || rec.Coverage[0].State != v1alpha1.CoverageForbidden {
		t.Fatalf("latest state record of c1/pods: %+v, %v", rec, err)
	}
}
