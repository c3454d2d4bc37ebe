package controller

import (
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/controller/conditionstable"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/inventory"
	"kollect.dev/agent/internal/inventory/delivery"
	"kollect.dev/agent/internal/sink"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// stateFixture is what fillInventoryStatus is given for one documented state: the inventory as
// the reconciler resolved it (targets, their conditions, scopes) and the manager's status.
type stateFixture struct {
	o            *inventoryObject
	st           inventory.Status
	sinkProblems []string
	retiring     string
}

var (
	cmKey    = collector.TargetKey{Namespace: "team", Name: "cm"}
	recRef   = inventory.SinkRef{Family: kollectv1.SinkFamilySnapshot, Namespace: "team", Name: "rec"}
	watching = metav1.Condition{Type: kollectv1.ConditionReady, Status: metav1.ConditionTrue, Reason: kollectv1.ReasonWatching, Message: "watching configmaps.v1"}
)

// healthy is an inventory of one watched target and one sink that holds its snapshot.
func healthy() stateFixture {
	inv := &kollectv1.KollectInventory{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "inv", Generation: 1}}
	o := &inventoryObject{obj: inv, status: &inv.Status, targets: []collector.TargetKey{cmKey},
		sinks: []inventory.SinkRef{recRef}}
	o.noteTarget(cmKey, []metav1.Condition{watching})
	return stateFixture{o: o, st: inventory.Status{Built: true, ItemCount: 2, Checksum: "c1", Targets: 1,
		Sinks: []inventory.SinkStatus{{Ref: recRef, Status: delivery.Status{Checksum: "c1", LastExport: time.Unix(100, 0)}}}}}
}

// targetState makes cm's Ready and Degraded what its target reconciler writes, and its rows
// what the collector says.
func (f stateFixture) targetState(problem *inventory.TargetProblem, conds ...metav1.Condition) stateFixture {
	f.o.notes, f.o.degradedTargets = nil, nil
	f.o.noteTarget(cmKey, conds)
	if problem != nil {
		problem.Target = cmKey
		f.st.Incomplete = append(f.st.Incomplete, *problem)
	}
	return f
}

func (f stateFixture) sinkState(edit func(*delivery.Status)) stateFixture {
	edit(&f.st.Sinks[0].Status)
	return f
}

func notReady(reason string) metav1.Condition {
	return metav1.Condition{Type: kollectv1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: "see the target"}
}

func degraded(reason string) metav1.Condition {
	return metav1.Condition{Type: kollectv1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason, Message: "3 objects"}
}

// stateFixtures builds every state of the table in docs/operations.md, by its name there.
func stateFixtures() map[string]func() stateFixture {
	return map[string]func() stateFixture{
		"every sink holds the current snapshot": healthy,
		"the first snapshot is not built yet": func() stateFixture {
			f := healthy()
			f.st.Built, f.st.Checksum, f.st.Sinks[0].Checksum = false, "", ""
			return f
		},
		"an export is on its way to a sink": func() stateFixture {
			return healthy().sinkState(func(s *delivery.Status) { s.Checksum = "c0" })
		},
		"a target's watch is still listing": func() stateFixture {
			return healthy().targetState(&inventory.TargetProblem{Syncing: true, Reason: "waiting for the watch to sync"}, notReady(kollectv1.ReasonSyncing))
		},
		"a target's watch is behind its events": func() stateFixture {
			f := healthy()
			f.st.Behind = []inventory.TargetProblem{{Target: cmKey, Reason: "the watch of configmaps is behind"}}
			return f
		},
		"exports are suspended (`spec.suspend`)": func() stateFixture {
			f := healthy()
			f.o.suspend = true
			return f
		},
		"the inventory is deleted and retiring": func() stateFixture {
			f := healthy()
			f.o.obj.SetDeletionTimestamp(&metav1.Time{Time: time.Unix(1000, 0)})
			f.o.retire = kollectv1.DeletionDelete
			f.st.Retire = &inventory.RetireProgress{Policy: kollectv1.DeletionDelete, Pending: []string{"snapshot/rec"}}
			f.retiring = retireViewOf(f.o, f.st, time.Unix(1001, 0)).message()
			return f
		},
		"a named target does not exist": func() stateFixture {
			f := healthy()
			gone := collector.TargetKey{Namespace: "team", Name: "gone"}
			f.o.missing, f.o.missingKeys = []string{"KollectTarget team/gone"}, []collector.TargetKey{gone}
			f.o.note(gone, kollectv1.CoverageFailed, "KollectTarget team/gone not found")
			f.st.Incomplete = []inventory.TargetProblem{{Target: gone, Reason: "target team/gone is not collected"}}
			return f
		},
		"a target's kind is not served (no CRD, or its CRD deleted)": func() stateFixture {
			return healthy().targetState(&inventory.TargetProblem{NotServed: true, Reason: "the API server no longer serves the kind"},
				notReady(kollectv1.ReasonKindNotFound))
		},
		"a target's kind is forbidden to the agent": func() stateFixture {
			return healthy().targetState(&inventory.TargetProblem{Forbidden: true, Reason: "configmaps is forbidden"}, notReady(kollectv1.ReasonForbidden))
		},
		"a target's profile is quarantined": func() stateFixture {
			return healthy().targetState(&inventory.TargetProblem{Quarantined: true, Reason: "profile team/cm is quarantined"},
				notReady(kollectv1.ReasonBudgetExceeded))
		},
		"a target's match fails on some objects": func() stateFixture {
			return healthy().targetState(nil, watching, degraded(kollectv1.ReasonMatchFailed))
		},
		"some objects of a target fail extraction": func() stateFixture {
			return healthy().targetState(nil, watching, degraded(kollectv1.ReasonExtractionFailed))
		},
		"some objects of a target are exported cut": func() stateFixture {
			return healthy().targetState(nil, watching, degraded(kollectv1.ReasonObjectsTruncated))
		},
		"a scope denies a target": func() stateFixture {
			// The target says so in its own Degraded too; the inventory takes the scope's word.
			f := healthy().targetState(nil, notReady(kollectv1.ReasonScopeKindDenied), degraded(kollectv1.ReasonScopeKindDenied))
			f.o.targets = nil
			f.o.denied = []scopeProblem{{reason: kollectv1.ReasonScopeKindDenied, message: "target team/cm not permitted"}}
			return f
		},
		"a scope denies a sink": func() stateFixture {
			f := healthy()
			f.st.Sinks = nil
			f.o.denied = []scopeProblem{{reason: kollectv1.ReasonScopeSinkDenied, message: "sink snapshot/rec not allowed: nothing is exported to it", sink: true}}
			return f
		},
		"a scope raises the export cadence": func() stateFixture {
			f := healthy()
			f.o.denied = []scopeProblem{{reason: kollectv1.ReasonScopeCadenceTooFast, message: "debounce below 10s: the minimum applies"}}
			return f
		},
		"a named sink does not exist or cannot be built": func() stateFixture {
			f := healthy()
			f.sinkProblems = []string{"snapshot sink team/nosuch: not found"}
			return f
		},
		"a sink's exports fail (transient or terminal: `status.sinks[].errorClass` says which)": func() stateFixture {
			return healthy().sinkState(func(s *delivery.Status) {
				s.Checksum, s.LastError, s.Class = "c0", "connection refused", sink.Transient
			})
		},
		"another agent holds a sink, which refuses this agent's writes": func() stateFixture {
			return healthy().sinkState(func(s *delivery.Status) {
				s.Checksum, s.Class = "c0", sink.Terminal
				s.Conflict = &delivery.Conflict{Refused: true, Other: export.Writer{Instance: "other"}, Message: "held by other"}
			})
		},
		"this agent holds a sink another agent also writes": func() stateFixture {
			return healthy().sinkState(func(s *delivery.Status) {
				s.Conflict = &delivery.Conflict{Other: export.Writer{Instance: "other"}, Message: "other writes here too"}
			})
		},
	}
}

// documentedStates reads the table of states from docs/operations.md.
func documentedStates(t *testing.T) ([]conditionstable.State, []conditionstable.Reason) {
	t.Helper()
	md, err := os.ReadFile(conditionstable.DocPath)
	if err != nil {
		t.Fatal(err)
	}
	states, err := conditionstable.States(md)
	if err != nil {
		t.Fatal(err)
	}
	reasons, err := conditionstable.Reasons(md)
	if err != nil {
		t.Fatal(err)
	}
	return states, reasons
}

// TestInventoryConditionsTable checks the table of states in docs/operations.md row by row: each
// state, given to the status code as the reconciler and the manager describe it, gives the
// row's Ready, Synced and Degraded. A row without a state here fails, and so does a state the
// table lacks. Filling the same state again changes nothing, so nothing is written again.
func TestInventoryConditionsTable(t *testing.T) {
	states, reasons := documentedStates(t)
	fixtures := stateFixtures()
	documented := documentedReasons(reasons)
	seen := map[string]bool{}
	for _, row := range states {
		seen[row.Name] = true
		build, ok := fixtures[row.Name]
		if !ok {
			t.Errorf("docs/operations.md documents the state %q, which this test does not build", row.Name)
			continue
		}
		f := build()
		fillInventoryStatus(f.o, f.st, f.sinkProblems, nil, f.retiring)
		got := map[string]conditionstable.Value{}
		for _, typ := range []string{kollectv1.ConditionReady, kollectv1.ConditionSynced, kollectv1.ConditionDegraded} {
			c := apimeta.FindStatusCondition(f.o.status.Conditions, typ)
			if c == nil {
				t.Errorf("%s: no %s condition", row.Name, typ)
				continue
			}
			got[typ] = conditionstable.Value{Status: string(c.Status), Reason: c.Reason}
			if c.Message == "" && (c.Status == metav1.ConditionFalse) != (typ == kollectv1.ConditionDegraded) {
				t.Errorf("%s: %s=%s %s has no message", row.Name, typ, c.Status, c.Reason)
			}
			if !documented[typ+"="+string(c.Status)+" "+c.Reason] {
				t.Errorf("%s: %s=%s with reason %s is not in the table of every reason", row.Name, typ, c.Status, c.Reason)
			}
		}
		for typ, want := range map[string]conditionstable.Value{kollectv1.ConditionReady: row.Ready, kollectv1.ConditionSynced: row.Synced, kollectv1.ConditionDegraded: row.Degraded} {
			if got[typ] != want {
				t.Errorf("%s: %s is %s, the table says %s", row.Name, typ, got[typ], want)
			}
		}
		before := f.o.status.DeepCopy()
		fillInventoryStatus(f.o, f.st, f.sinkProblems, nil, f.retiring)
		if !equality.Semantic.DeepEqual(before, f.o.status) {
			t.Errorf("%s: filling the same state again changed the status", row.Name)
		}
	}
	for name := range fixtures {
		if !seen[name] {
			t.Errorf("the state %q is built here but not documented in docs/operations.md", name)
		}
	}
}

// documentedReasons is the set of "Type=Status Reason" the table of every reason lists for
// inventories.
func documentedReasons(rows []conditionstable.Reason) map[string]bool {
	out := map[string]bool{}
	for _, r := range rows {
		if r.Kind != "Inventory" {
			continue
		}
		for _, c := range r.Conditions {
			for _, reason := range r.Reasons {
				out[c+" "+reason] = true
			}
		}
	}
	return out
}

// selfClearing are the reasons of Ready=False and Synced=False that leave Degraded False: they
// clear by themselves or were asked for (docs/operations.md lists the same).
var selfClearing = []string{kollectv1.ReasonSnapshotPending, kollectv1.ReasonTargetsSyncing, kollectv1.ReasonExportPending,
	kollectv1.ReasonWatchBehind, kollectv1.ReasonSuspended, kollectv1.ReasonRetiring}
