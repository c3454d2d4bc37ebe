package hubclient

import (
	"context"
	"fmt"
	"sort"

	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// collectStatus assembles the heartbeat from the cluster's Kollect objects: inventories with
// their item counts and conditions, and per sink the freshest export and last error. Rows are
// never sent: the hub only sees counts.
func collectStatus(ctx context.Context, c client.Reader) ([]*fleetv1.InventoryStatus, []*fleetv1.SinkStatus, error) {
	var invs kollectv1.KollectInventoryList
	if err := c.List(ctx, &invs); err != nil {
		return nil, nil, err
	}
	var cinvs kollectv1.KollectClusterInventoryList
	if err := c.List(ctx, &cinvs); err != nil {
		return nil, nil, err
	}
	sinks := map[string]*fleetv1.SinkStatus{}
	unconfirmed := map[string]bool{} // an inventory of the sink has no confirmation yet
	missing := newMissingSinks(c)
	var out []*fleetv1.InventoryStatus
	add := func(ns, name string, generation int64, st kollectv1.KollectInventoryStatus, named []sinkRef) {
		out = append(out, &fleetv1.InventoryStatus{Namespace: ns, Name: name, ItemCount: st.ItemCount,
			Conditions: current(conditions(st.Conditions), generation, st.ObservedGeneration), Coverage: coverage(st.Coverage)})
		reported := map[string]bool{}
		for _, s := range st.Sinks {
			sns := s.Namespace
			if sns == "" {
				sns = ns
			}
			kind := sinkKind(s.Family)
			key := kind + "/" + sns + "/" + s.Name
			reported[key] = true
			cur := sinks[key]
			if cur == nil {
				cur = &fleetv1.SinkStatus{Kind: kind, Namespace: sns, Name: s.Name, Type: sinkType(ctx, c, s.Family, sns, s.Name)}
				sinks[key] = cur
			}
			if s.LastExportTime != nil && (cur.LastSuccessTime == nil || s.LastExportTime.After(cur.LastSuccessTime.AsTime())) {
				cur.LastSuccessTime = timestamppb.New(s.LastExportTime.Time)
			}
			// A sink is as current as its least recently confirmed inventory.
			switch {
			case s.LastConfirmTime == nil:
				unconfirmed[key] = true
			case cur.LastConfirmTime == nil || s.LastConfirmTime.Before(ptrTime(cur.LastConfirmTime)):
				cur.LastConfirmTime = timestamppb.New(s.LastConfirmTime.Time)
			}
			if s.LastAttemptTime != nil && (cur.LastAttemptTime == nil || s.LastAttemptTime.After(cur.LastAttemptTime.AsTime())) {
				cur.LastAttemptTime = timestamppb.New(s.LastAttemptTime.Time)
			}
			if s.LastError != "" {
				cur.LastError = s.LastError
				cur.ErrorClass = errorClass(s.ErrorClass)
			}
		}
		id := name
		if ns != "" {
			id = ns + "/" + name
		}
		missing.check(ctx, id, named, reported)
	}
	for _, i := range invs.Items {
		add(i.Namespace, i.Name, i.Generation, i.Status, namedSinks(i.Namespace, i.Spec.Sinks))
	}
	for _, i := range cinvs.Items {
		add("", i.Name, i.Generation, i.Status, clusterNamedSinks(i.Spec.Sinks))
	}
	missing.add(sinks)
	sinkList := make([]*fleetv1.SinkStatus, 0, len(sinks))
	for key, s := range sinks {
		if unconfirmed[key] {
			s.LastConfirmTime = nil
		}
		sinkList = append(sinkList, s)
	}
	sort.Slice(sinkList, func(i, j int) bool {
		return sinkList[i].Kind+sinkList[i].Namespace+sinkList[i].Name < sinkList[j].Kind+sinkList[j].Namespace+sinkList[j].Name
	})
	return out, sinkList, nil
}

func ptrTime(ts *timestamppb.Timestamp) *metav1.Time {
	t := metav1.NewTime(ts.AsTime())
	return &t
}

// current reports an inventory whose status describes an older generation than its spec (just
// edited, by a bundle for instance, and not reconciled yet) as Ready and Synced Unknown: its
// conditions and coverage are the previous spec's, and a reader judging the new one, such as
// a rollout gate waiting out a canary's minimum healthy time, must wait rather than pass it on
// the old spec's health.
func current(conds []*fleetv1.Condition, generation, observed int64) []*fleetv1.Condition {
	if observed >= generation {
		return conds
	}
	for _, c := range conds {
		if c.Type == kollectv1.ConditionReady || c.Type == kollectv1.ConditionSynced {
			c.Status, c.Reason = string(metav1.ConditionUnknown), kollectv1.ReasonSyncing
			c.Message = fmt.Sprintf("the status describes generation %d; generation %d is not reconciled yet", observed, generation)
		}
	}
	return conds
}

func conditions(in []metav1.Condition) []*fleetv1.Condition {
	out := make([]*fleetv1.Condition, 0, len(in))
	for _, c := range in {
		out = append(out, &fleetv1.Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message,
			LastTransitionTime: timestamppb.New(c.LastTransitionTime.Time)})
	}
	return out
}

func sinkKind(f kollectv1.SinkFamily) string {
	switch f {
	case kollectv1.SinkFamilySnapshot:
		return "KollectSnapshotSink"
	case kollectv1.SinkFamilyDatabase:
		return "KollectDatabaseSink"
	default:
		return "KollectEventSink"
	}
}

func sinkType(ctx context.Context, c client.Reader, f kollectv1.SinkFamily, ns, name string) string {
	obj, err := sinkObject(ctx, c, f, ns, name)
	if err != nil {
		return ""
	}
	switch s := obj.(type) {
	case *kollectv1.KollectSnapshotSink:
		return string(s.Spec.Type)
	case *kollectv1.KollectDatabaseSink:
		return string(s.Spec.Type)
	case *kollectv1.KollectEventSink:
		return string(s.Spec.Type)
	}
	return ""
}

// errorClass maps the errorClass of an inventory's sink status to the protocol's.
func errorClass(c string) fleetv1.SinkErrorClass {
	switch c {
	case kollectv1.SinkErrorTerminal:
		return fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TERMINAL
	case kollectv1.SinkErrorCircuitOpen:
		return fleetv1.SinkErrorClass_SINK_ERROR_CLASS_CIRCUIT_OPEN
	default:
		return fleetv1.SinkErrorClass_SINK_ERROR_CLASS_TRANSIENT
	}
}

// coverage maps an inventory's coverage to the heartbeat's.
func coverage(c []kollectv1.TargetCoverage) []*fleetv1.TargetCoverage {
	out := make([]*fleetv1.TargetCoverage, 0, len(c))
	for _, e := range c {
		out = append(out, &fleetv1.TargetCoverage{Target: e.Target, State: string(e.State), Rows: e.Rows,
			ExtractionErrors: e.ExtractionErrors, Reason: e.Reason})
	}
	return out
}
