package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/validation"

	"kollect.dev/hub/internal/auth"
	"kollect.dev/hub/internal/bundle"
	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// ApplyBundle implements FleetService.
func (f *fleetService) ApplyBundle(ctx context.Context, req *connect.Request[fleetv1.ApplyBundleRequest]) (*connect.Response[fleetv1.ApplyBundleResponse], error) {
	m := req.Msg
	if errs := validation.IsDNS1123Label(m.GetName()); len(errs) > 0 {
		return nil, invalid("bundle name %q: %s", m.GetName(), strings.Join(errs, ", "))
	}
	sel, err := labelsel.FromProto(m.GetClusterSelector())
	if err != nil {
		return nil, invalid("%v", err)
	}
	selJSON, err := labelsel.Encode(sel)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	refs, err := f.s.validator.Validate(ctx, m.GetManifests())
	var bad *bundle.InvalidError
	if errors.As(err, &bad) {
		return nil, connect.NewError(connect.CodeInvalidArgument, bad)
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	objects, err := json.Marshal(refs)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	rev := store.Revision{Bundle: m.GetName(), Manifests: m.GetManifests(), Selector: selJSON,
		Digest: bundle.Digest(m.GetManifests(), selJSON), Objects: string(objects), CreatedBy: actor(ctx),
		CreatedAt: f.s.cfg.Now(), Message: m.GetMessage()}
	if m.GetDryRun() {
		return f.dryRun(ctx, rev, m.GetHold())
	}
	out, created, selected, err := f.s.store.CreateRevision(ctx, rev, m.GetDescription(), m.GetHold(), labelsel.Match)
	if err != nil {
		return nil, rolloutError(err)
	}
	f.s.dispatcher.Kick()
	f.s.watcher.Poke()
	f.s.rollouts.Wake()
	verb := "unchanged"
	if created {
		verb = "created"
	}
	if m.GetHold() {
		verb += " and held"
	}
	auth.Note(ctx, fmt.Sprintf("bundle/%s@%d", out.Bundle, out.Revision),
		fmt.Sprintf("%s %s, %d objects, %d clusters selected", verb, out.Digest, len(refs), len(selected)))
	f.s.log.InfoContext(ctx, "bundle applied", "bundle", out.Bundle, "revision", out.Revision, "created", created,
		"clusters", len(selected), "by", actor(ctx))
	pr, err := revisionToProto(out)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&fleetv1.ApplyBundleResponse{Revision: pr, Created: created, SelectedClusters: selected}), nil
}

// dryRun reports what ApplyBundle would store and where it would go, without storing it; it
// refuses what ApplyBundle would refuse.
func (f *fleetService) dryRun(ctx context.Context, rev store.Revision, hold bool) (*connect.Response[fleetv1.ApplyBundleResponse], error) {
	if !hold {
		active, err := f.s.store.ListRollouts(ctx, store.RolloutFilter{Bundle: rev.Bundle, ActiveOnly: true})
		if err != nil {
			return nil, storeError(err)
		}
		if len(active) > 0 {
			return nil, rolloutError(&store.ActiveRolloutError{Bundle: rev.Bundle, RolloutID: active[0].ID})
		}
	}
	latest, err := f.s.store.GetRevision(ctx, rev.Bundle, 0)
	created := true
	switch {
	case errors.Is(err, store.ErrNotFound):
		rev.Revision = 1
	case err != nil:
		return nil, storeError(err)
	case latest.Digest == rev.Digest:
		rev, created = latest, false
	default:
		rev.Revision = latest.Revision + 1
	}
	clusters, err := f.s.store.ListClusters(ctx)
	if err != nil {
		return nil, storeError(err)
	}
	var selected []string
	for _, c := range clusters {
		ok, err := labelsel.Match(rev.Selector, c.Labels)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		if ok && !c.Revoked && c.Approval != store.ApprovalPending {
			selected = append(selected, c.Name)
		}
	}
	pr, err := revisionToProto(rev)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	auth.Note(ctx, fmt.Sprintf("bundle/%s@%d", rev.Bundle, rev.Revision), "dry run, nothing stored")
	return connect.NewResponse(&fleetv1.ApplyBundleResponse{Revision: pr, Created: created, SelectedClusters: selected}), nil
}

// listBundles converts every live bundle, counting the clusters its selector matches.
func (s *Server) listBundles(ctx context.Context) ([]*fleetv1.Bundle, error) {
	bundles, err := s.store.ListBundles(ctx)
	if err != nil {
		return nil, err
	}
	desired, err := s.store.Desired(ctx, "")
	if err != nil {
		return nil, err
	}
	selected := map[string]int64{}
	for _, d := range desired {
		selected[d.Bundle]++
	}
	out := make([]*fleetv1.Bundle, 0, len(bundles))
	for _, b := range bundles {
		sel, err := labelsel.Decode(b.Selector)
		if err != nil {
			return nil, err
		}
		out = append(out, &fleetv1.Bundle{Name: b.Name, Description: b.Description, LatestRevision: b.LatestRevision,
			ClusterSelector: labelsel.ToProto(sel), CreatedAt: timestamppb.New(b.CreatedAt),
			UpdatedAt: timestamppb.New(b.UpdatedAt), SelectedClusters: selected[b.Name],
			StableRevision: b.StableRevision, ActiveRolloutId: b.ActiveRolloutID})
	}
	return out, nil
}

// ListBundles implements FleetService.
func (f *fleetService) ListBundles(ctx context.Context, _ *connect.Request[fleetv1.ListBundlesRequest]) (*connect.Response[fleetv1.ListBundlesResponse], error) {
	bundles, err := f.s.listBundles(ctx)
	if err != nil {
		return nil, storeError(err)
	}
	return connect.NewResponse(&fleetv1.ListBundlesResponse{Bundles: bundles}), nil
}

// GetBundle implements FleetService.
func (f *fleetService) GetBundle(ctx context.Context, req *connect.Request[fleetv1.GetBundleRequest]) (*connect.Response[fleetv1.GetBundleResponse], error) {
	bundles, err := f.s.listBundles(ctx)
	if err != nil {
		return nil, storeError(err)
	}
	var b *fleetv1.Bundle
	for _, cand := range bundles {
		if cand.GetName() == req.Msg.GetName() {
			b = cand
		}
	}
	if b == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("bundle %q: %w", req.Msg.GetName(), store.ErrNotFound))
	}
	rev, err := f.s.store.GetRevision(ctx, b.GetName(), req.Msg.GetRevision())
	if err != nil {
		return nil, storeError(err)
	}
	pr, err := revisionToProto(rev)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&fleetv1.GetBundleResponse{Bundle: b, Revision: pr}), nil
}

// ListBundleRevisions implements FleetService.
func (f *fleetService) ListBundleRevisions(ctx context.Context, req *connect.Request[fleetv1.ListBundleRevisionsRequest]) (*connect.Response[fleetv1.ListBundleRevisionsResponse], error) {
	revs, err := f.s.store.ListRevisions(ctx, req.Msg.GetName())
	if err != nil {
		return nil, storeError(err)
	}
	out := &fleetv1.ListBundleRevisionsResponse{}
	for _, r := range revs {
		pr, err := revisionToProto(r)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		out.Revisions = append(out.Revisions, pr)
	}
	return connect.NewResponse(out), nil
}

// DiffBundleRevisions implements FleetService.
func (f *fleetService) DiffBundleRevisions(ctx context.Context, req *connect.Request[fleetv1.DiffBundleRevisionsRequest]) (*connect.Response[fleetv1.DiffBundleRevisionsResponse], error) {
	name := req.Msg.GetName()
	to, err := f.s.store.GetRevision(ctx, name, req.Msg.GetToRevision())
	if err != nil {
		return nil, storeError(err)
	}
	fromRev := req.Msg.GetFromRevision()
	if fromRev == 0 {
		fromRev = to.Revision - 1
	}
	if fromRev < 1 {
		return nil, invalid("bundle %s has no revision before %d", name, to.Revision)
	}
	from, err := f.s.store.GetRevision(ctx, name, fromRev)
	if err != nil {
		return nil, storeError(err)
	}
	diff, err := bundle.Diff(name, from.Revision, to.Revision, from.Manifests, to.Manifests)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&fleetv1.DiffBundleRevisionsResponse{FromRevision: from.Revision, ToRevision: to.Revision,
		UnifiedDiff: diff, SelectorChanged: from.Selector != to.Selector}), nil
}

// DeleteBundle implements FleetService.
func (f *fleetService) DeleteBundle(ctx context.Context, req *connect.Request[fleetv1.DeleteBundleRequest]) (*connect.Response[fleetv1.DeleteBundleResponse], error) {
	if err := f.s.store.DeleteBundle(ctx, req.Msg.GetName()); err != nil {
		return nil, storeError(err)
	}
	f.s.dispatcher.Kick()
	f.s.watcher.Poke()
	auth.Note(ctx, "bundle/"+req.Msg.GetName(), "deleted; agents prune its objects")
	return connect.NewResponse(&fleetv1.DeleteBundleResponse{}), nil
}
