package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestRestartWithUnknownTargetExportsTheKnownOnes is issue 18 point 4: an agent that starts
// while one target's rows are unknown (its kind forbidden, or the target deleted while the
// agent was down) exports the other targets, with the unknown target's last rows kept from
// the snapshot the agent's --cache-dir holds, and says which target is unknown. Without that
// snapshot (a new cache directory) the export waits, and the inventory says so. The unknown
// target is one of ServiceAccounts, a kind the restricted agent may not list (a profile on
// Secrets would also depend on namespaces opted in to Secret extraction).
func TestRestartWithUnknownTargetExportsTheKnownOnes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		unknown func(t *testing.T, ns string) (restricted bool)
		ready   string // the Ready reason while accounts is unknown
	}{
		{name: "forbidden", ready: kollectv1.ReasonTargetsIncomplete, unknown: func(t *testing.T, ns string) bool { return true }},
		{name: "deleted", ready: kollectv1.ReasonTargetNotFound, unknown: func(t *testing.T, ns string) bool {
			if err := cp.Client.Delete(context.Background(), &kollectv1.KollectTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "accounts"}}); err != nil {
				t.Fatal(err)
			}
			return false
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t, "unknown-"+tc.name)
			ctx := context.Background()
			create(t,
				&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa1"}},
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1"}})
			create(t, profileTarget(ns, "accounts", kollectv1.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"},
				kollectv1.Attribute{Name: "name", JSONPath: "{.metadata.name}"})...)
			create(t, profileTarget(ns, "cms", kollectv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
				kollectv1.Attribute{Name: "name", CEL: "object.metadata.name"})...)
			create(t, recordingSink(ns), inventoryFor(ns, "inv", []string{"cms", "accounts"}, 200*time.Millisecond))

			// The first agent exports both targets and records what the sink accepted.
			recs := &recorders{}
			cacheDir := t.TempDir()
			stop := startAgentIn(t, nil, "c1", ns, recs.factories(), cacheDir)
			rec := recs.get(ns + "/rec")
			if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return len(b) > 0 && sortedRowNames(b[len(b)-1].Envelope.Rows) == "c1,sa1" }) {
				t.Fatal("the first agent did not export c1,sa1")
			}
			inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
			eventually(t, 10*time.Second, "status with the accepted checksum", func() (bool, string) {
				_ = cp.Client.Get(ctx, client.ObjectKeyFromObject(inv), inv)
				return len(inv.Status.Sinks) == 1 && inv.Status.Sinks[0].Checksum == rec.Last().Envelope.Checksum, fmt.Sprint(inv.Status.Sinks)
			})
			stop()

			// While no agent runs, the accounts target becomes unknown and a known target changes.
			restricted := tc.unknown(t, ns)
			create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c2"}})
			cfg := cp.Config
			if restricted {
				user := "kollect-restart-" + tc.name
				var err error
				if cfg, err = cp.AddUser(user); err != nil {
					t.Fatal(err)
				}
				grantConfigMapsOnly(t, user)
			}
			conditionIs := func(typ string, status metav1.ConditionStatus, reason string, want ...string) {
				t.Helper()
				got := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inv"}}
				scopeCondition(t, got, func() []metav1.Condition { return got.Status.Conditions }, typ, status, reason, want...)
			}

			// An agent with an empty cache directory has no earlier rows of accounts: it waits,
			// and says so. The condition is written after the build that held the export, so
			// no export since the first agent's means none was made.
			n := len(rec.Batches())
			stop = startAgentIn(t, cfg, "c1", ns, recs.factories(), t.TempDir())
			conditionIs(kollectv1.ConditionSynced, metav1.ConditionFalse, kollectv1.ReasonTargetsIncomplete, ns+"/accounts", "the export waits")
			conditionIs(kollectv1.ConditionReady, metav1.ConditionFalse, tc.ready)
			if got := len(rec.Batches()) - n; got != 0 {
				t.Fatalf("an agent without the accounts' rows exported %d snapshots, the last %q", got, sortedRowNames(rec.Last().Envelope.Rows))
			}
			stop()

			// An agent with the first one's cache directory exports c2, keeping sa1.
			startAgentIn(t, cfg, "c1", ns, recs.factories(), cacheDir)
			if !rec.WaitFor(30*time.Second, func(b []*sink.Batch) bool { return sortedRowNames(b[len(b)-1].Envelope.Rows) == "c1,c2,sa1" }) {
				t.Fatalf("c2 was not exported with the accounts' last rows; last export %q", sortedRowNames(rec.Last().Envelope.Rows))
			}
			for i, b := range rec.Batches()[n:] {
				if !slices.ContainsFunc(b.Envelope.Rows, func(r export.Row) bool { return r.Name == "sa1" }) {
					t.Fatalf("export %d dropped the unknown target's row sa1: %q", n+i, sortedRowNames(b.Envelope.Rows))
				}
			}
			conditionIs(kollectv1.ConditionReady, metav1.ConditionFalse, tc.ready, ns+"/accounts")
			conditionIs(kollectv1.ConditionSynced, metav1.ConditionFalse, kollectv1.ReasonTargetsIncomplete,
				ns+"/accounts", "the sinks get their last rows, from the snapshot built")
		})
	}
}

func sortedRowNames(rows []export.Row) string {
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}
