package controller

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/inventory"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// fillInventoryStatus maps the manager's view onto the API status. Times are truncated to
// seconds, as the API stores them, so an unchanged status compares equal and is not written.
// retiring is what a deleted inventory waits for ("" while it lives).
func fillInventoryStatus(o *inventoryObject, st inventory.Status, sinkProblems []string, dests map[inventory.SinkRef]string, retiring string) {
	gen := o.obj.GetGeneration()
	s := o.status
	s.ObservedGeneration = gen
	s.Targets = int32(len(o.targets))
	if st.Built {
		s.ItemCount, s.Checksum = int64(st.ItemCount), st.Checksum
	}
	if st.Coverage != nil {
		s.Coverage = st.Coverage
	}
	state := inventoryState{
		built: st.Built, items: st.ItemCount, targets: len(o.targets), retiring: retiring, suspended: o.suspend,
		held: st.Held, carriedFrom: st.CarriedFrom, degradedTargets: o.degradedTargets, denied: o.denied, sinks: len(st.Sinks),
	}
	s.Sinks = sinkStatuses(o, st, dests, &state)
	for _, p := range sinkProblems {
		state.invalidSinks = append(state.invalidSinks, issue{subject: p, message: p})
	}
	state.addTargets(o, st)
	for _, p := range st.Behind {
		state.behind = append(state.behind, issue{subject: p.Target.String(), message: p.String()})
	}
	ready, synced, degraded := inventoryConditions(state)
	for _, c := range []struct {
		typ string
		v   conditionValue
	}{{kollectv1.ConditionReady, ready}, {kollectv1.ConditionSynced, synced}, {kollectv1.ConditionDegraded, degraded}} {
		setCondition(&s.Conditions, gen, c.typ, c.v.status, c.v.reason, c.v.message)
	}
}

// addTargets sorts the targets whose rows are not current by why: a target the agent has not
// taken up yet (no Ready=False of its own, or Ready=False Syncing) is starting, like a watch
// still listing, so an inventory created with its targets is not degraded for a moment.
func (s *inventoryState) addTargets(o *inventoryObject, st inventory.Status) {
	missing := make(map[collector.TargetKey]bool, len(o.missingKeys))
	for i, k := range o.missingKeys {
		missing[k] = true
		s.missing = append(s.missing, issue{subject: k.String(), message: o.missing[i]})
	}
	resolved := make(map[collector.TargetKey]bool, len(o.targets))
	for _, k := range o.targets {
		resolved[k] = true
	}
	for _, p := range st.Incomplete {
		i := issue{subject: p.Target.String(), message: p.String()}
		note, noted := o.notes[p.Target]
		switch {
		case missing[p.Target]:
			// Named in s.missing already.
		case p.Forbidden:
			s.forbidden = append(s.forbidden, i)
		case p.Quarantined:
			s.quarantined = append(s.quarantined, i)
		case p.Syncing:
			s.syncing = append(s.syncing, i)
		case !p.NotServed && resolved[p.Target] && (!noted || note.State == kollectv1.CoverageSyncing):
			s.syncing = append(s.syncing, i)
		default:
			s.uncollected = append(s.uncollected, i)
		}
	}
}

// sinkStatuses builds status.sinks and records each sink's problems in state.
func sinkStatuses(o *inventoryObject, st inventory.Status, dests map[inventory.SinkRef]string, state *inventoryState) []kollectv1.SinkExportStatus {
	prior := map[string]kollectv1.SinkExportStatus{}
	for _, p := range o.status.Sinks {
		prior[string(p.Family)+"/"+p.Namespace+"/"+p.Name] = p
	}
	var out []kollectv1.SinkExportStatus
	for _, ws := range st.Sinks {
		ns := ws.Ref.Namespace
		if o.obj.GetNamespace() != "" {
			ns = "" // implied for namespaced inventories
		}
		name := fmt.Sprintf("%s/%s", ws.Ref.Family, ws.Ref.Name)
		es := kollectv1.SinkExportStatus{Family: ws.Ref.Family, Name: ws.Ref.Name, Namespace: ns,
			Checksum: ws.Checksum, Coverage: ws.Coverage, Destination: dests[ws.Ref], Rows: int64(ws.Rows), LastError: ws.LastError}
		switch {
		case ws.Conflict != nil:
			// Both agents report it: the refused one's LastError is the refusal, the holder's
			// export succeeded but its sink's lastError says who contends it.
			i := issue{subject: name, message: name + ": " + ws.Conflict.Message}
			state.conflicts = append(state.conflicts, i)
			es.LastError = ws.Conflict.Message
			if ws.Conflict.Refused {
				es.ErrorClass = string(ws.Class)
				state.refused = append(state.refused, i)
			}
		case ws.LastError != "":
			es.ErrorClass = string(ws.Class)
			state.failingSinks = append(state.failingSinks, issue{subject: name, message: name + ": " + ws.LastError})
		}
		p, known := prior[string(es.Family)+"/"+es.Namespace+"/"+es.Name]
		es.LastExportTime = statusTime(ws.LastExport, p.LastExportTime, known)
		es.LastConfirmTime = statusTime(ws.LastConfirm, p.LastConfirmTime, known)
		es.LastAttemptTime = statusTime(ws.LastAttempt, p.LastAttemptTime, known)
		if st.Built && ws.Checksum != st.Checksum {
			state.pending = append(state.pending, issue{subject: name, message: name})
		}
		out = append(out, es)
	}
	return out
}

// statusTime is t as the API stores it, or the time status already had when this process has
// not seen one.
func statusTime(t time.Time, prior *metav1.Time, known bool) *metav1.Time {
	if !t.IsZero() {
		v := metav1.NewTime(t.Truncate(time.Second))
		return &v
	}
	if known {
		return prior
	}
	return nil
}
