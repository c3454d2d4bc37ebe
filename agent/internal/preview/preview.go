package preview

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"kollect.dev/agent/internal/cli/offline"
	"kollect.dev/agent/internal/collector"
	"kollect.dev/agent/internal/hubclient/manifests"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Limits of an evaluation.
const (
	// DefaultDistinctLimit caps the distinct values counted per attribute.
	DefaultDistinctLimit = 10_000
	// MaxSamples caps sample rows per target, whatever the request asks.
	MaxSamples = 5
	// errorSamples is how many failing objects an attribute names.
	errorSamples = 3
)

// Env is what an evaluation reads the cluster with, and the agent's rules.
type Env struct {
	// Dynamic lists objects; Mapper resolves kinds (a kind without a mapping is not served).
	Dynamic dynamic.Interface
	Mapper  apimeta.RESTMapper
	// Cluster is the agent's cluster name, as rows carry it.
	Cluster string
	// Allow is the applier's allowlist: a bundle holding an object it refuses is not evaluated.
	Allow manifests.Allowlist
	// Samples allows sample rows (--preview-samples).
	Samples bool
	// DistinctLimit caps distinct values per attribute (DefaultDistinctLimit when 0).
	DistinctLimit int
	// PageSize of list requests (offline.PageSize when 0).
	PageSize int64
	// AgentVersion is reported in the result.
	AgentVersion string
}

// Evaluate evaluates req on the cluster and always returns a result: a bundle that cannot be
// evaluated at all has result.error set, one target failing leaves the others evaluated. It
// stops listing at ctx's end or the request's deadline, whichever is first; targets cut short
// are FAILED with the reason.
func Evaluate(ctx context.Context, req *fleetv1.PreviewRequest, env Env) *fleetv1.PreviewResult {
	start := time.Now()
	if env.DistinctLimit <= 0 {
		env.DistinctLimit = DefaultDistinctLimit
	}
	res := &fleetv1.PreviewResult{PreviewId: req.GetId(), Cluster: env.Cluster, DistinctValuesLimit: int64(env.DistinctLimit),
		AgentVersion: env.AgentVersion}
	if d := req.GetDeadline(); d != nil && d.IsValid() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.AsTime())
		defer cancel()
	}
	samples := 0
	if n := int(req.GetMaxSamples()); n > 0 {
		if env.Samples {
			samples = min(n, MaxSamples)
		} else {
			res.SamplesRefused = true
		}
	}
	if err := evaluate(ctx, req, env, samples, res); err != nil {
		res.Error = err.Error()
		res.Targets, res.Inventories = nil, nil
	}
	res.Took = durationpb.New(time.Since(start))
	res.EvaluatedAt = timestamppb.Now()
	return res
}

func evaluate(ctx context.Context, req *fleetv1.PreviewRequest, env Env, samples int, res *fleetv1.PreviewResult) error {
	objs, err := manifests.Decode(req.GetManifests())
	if err != nil {
		return fmt.Errorf("bundle manifests do not decode: %w", err)
	}
	for _, u := range objs {
		name := u.GetName()
		if ns := u.GetNamespace(); ns != "" {
			name = ns + "/" + name
		}
		if reason := env.Allow.Refuse(u); reason != "" {
			return fmt.Errorf("%s %s is refused by the agent: %s", u.GetKind(), name, reason)
		}
	}
	cfg, err := offline.Load(objs)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	jobs, planErr := cfg.PlanAll(offline.MapperResolver(env.Mapper))
	// Namespace labels serve namespaces.selector; an agent that may not list namespaces
	// evaluates with every namespace unlabelled, as its watches would see them.
	nsLabels, _ := offline.NamespaceLabels(ctx, env.Dynamic)
	acc := newAccumulator(env.DistinctLimit, samples)
	stream := offline.NewStream(jobs, env.Cluster, nsLabels, acc.hooks())
	listErrs := stream.List(ctx, env.Dynamic, env.PageSize, nil)
	invs := stream.FinishInventories()

	rawOnlyRollups := rollupOnlyTargets(jobs)
	for _, t := range stream.Targets() {
		pt := acc.target(t, stream.Stats(t.Key))
		if rawOnlyRollups[t.Key] {
			pt.Samples = nil
		}
		pt.KindState = fleetv1.PreviewKindState_PREVIEW_KIND_STATE_SERVED
		if err := listErrs[t.GVK]; err != nil {
			pt.KindState, pt.Message = listState(err, t.Resource)
		}
		res.Targets = append(res.Targets, pt)
	}
	for _, te := range targetErrors(planErr) {
		pt := &fleetv1.PreviewTarget{Target: te.Target.String(), Profile: te.Profile, Group: te.GVK.Group, Version: te.GVK.Version,
			Kind: te.GVK.Kind, KindState: fleetv1.PreviewKindState_PREVIEW_KIND_STATE_FAILED, Message: te.Error()}
		if apimeta.IsNoMatchError(te.Err) {
			pt.KindState = fleetv1.PreviewKindState_PREVIEW_KIND_STATE_NOT_SERVED
			pt.Message = fmt.Sprintf("the API server does not serve %s %s", te.GVK.GroupVersion(), te.GVK.Kind)
		}
		res.Targets = append(res.Targets, pt)
	}
	sortTargets(res.Targets)
	res.Inventories = inventories(cfg, invs)
	return nil
}

// rollupOnlyTargets are the targets whose every inventory exports only its rollups (rawRows:
// Exclude): no sink receives their raw rows, so none is a sample of what a sink would get.
// A target no inventory holds exports nothing yet; its rows are what an inventory would get.
func rollupOnlyTargets(jobs []offline.Job) map[collector.TargetKey]bool {
	excluded, raw := map[collector.TargetKey]bool{}, map[collector.TargetKey]bool{}
	for _, j := range jobs {
		if j.Inventory != "" && j.Rollups != nil && j.Rollups.ExcludeRaw {
			excluded[j.Target.Key] = true
		} else {
			raw[j.Target.Key] = true
		}
	}
	for k := range raw {
		delete(excluded, k)
	}
	return excluded
}

// targetErrors takes Plan's joined errors apart (joins may nest), each target once; anything
// else is not a target's.
func targetErrors(err error) []*offline.TargetError {
	var out []*offline.TargetError
	seen := map[string]bool{} // a target in two inventories fails twice
	var walk func(error)
	walk = func(err error) {
		if te, ok := err.(*offline.TargetError); ok {
			if !seen[te.Target.String()] {
				seen[te.Target.String()] = true
				out = append(out, te)
			}
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// listState classifies a failure to list a kind: forbidden with the API server's message, not
// served (the resource went away after the mapping was cached), or failed.
func listState(err error, gvr schema.GroupVersionResource) (fleetv1.PreviewKindState, string) {
	switch {
	case apierrors.IsForbidden(err):
		return fleetv1.PreviewKindState_PREVIEW_KIND_STATE_FORBIDDEN, err.Error()
	case apierrors.IsNotFound(err):
		return fleetv1.PreviewKindState_PREVIEW_KIND_STATE_NOT_SERVED, fmt.Sprintf("listing %s: %v", resource(gvr), err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return fleetv1.PreviewKindState_PREVIEW_KIND_STATE_FAILED,
			fmt.Sprintf("listing %s: the preview's deadline passed; counts are partial", resource(gvr))
	default:
		return fleetv1.PreviewKindState_PREVIEW_KIND_STATE_FAILED, fmt.Sprintf("listing %s: %v", resource(gvr), err)
	}
}

func resource(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource + "." + gvr.Version
	}
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}

// inventories answers for each inventory of the bundle, those whose targets all failed to plan
// included (with no rows); a bundle without inventories has the engine's one pseudo-inventory.
func inventories(cfg *offline.Config, invs []offline.InventoryRows) []*fleetv1.PreviewInventory {
	byName := map[string]offline.InventoryRows{}
	for _, inv := range invs {
		byName[inv.Inventory] = inv
	}
	names := cfg.Inventories()
	if len(names) == 0 {
		for _, inv := range invs {
			names = append(names, inv.Inventory)
		}
	}
	out := make([]*fleetv1.PreviewInventory, 0, len(names))
	for _, n := range names {
		inv := byName[n]
		pi := &fleetv1.PreviewInventory{Inventory: n, Targets: cfg.TargetsOf(n), Rows: int64(len(inv.Rows))}
		if pi.Targets == nil {
			pi.Targets = inv.Targets
		}
		for i := range inv.Rows {
			pi.EstimatedBytes += int64(len(inv.Rows[i].CanonicalJSON())) + 1 // one NDJSON line
		}
		out = append(out, pi)
	}
	return out
}
