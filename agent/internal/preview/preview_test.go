package preview

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"kollect.dev/agent/internal/cli/offline"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/hubclient/manifests"
	"kollect.dev/agent/internal/sink/snapshot"
	kollectv1 "kollect.dev/api/v1alpha1"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/testenv"
)

var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	var err error
	if cp, err = testenv.Start("preview", testenv.Options{WithoutCRDs: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err = seed(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = cp.Stop()
		os.Exit(1)
	}
	code := m.Run()
	_ = cp.Stop()
	os.Exit(code)
}

// agentSA is the service account previews run as in the RBAC test: it may read ConfigMaps and
// Namespaces, nothing else.
const agentSA = "system:serviceaccount:kollect:preview-agent"

// seed writes six ConfigMaps in each of team-a and team-b (and one in other, which the target
// does not select). Of each six, the fifth has a size that is not an integer and the sixth
// no owner: 8 rows, 2 errors on size, 2 on owner; teams t0..t2 give the team attribute a
// cardinality of 3.
func seed(ctx context.Context) error {
	for _, ns := range []string{"team-a", "team-b", "other", "kollect"} {
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	for _, ns := range []string{"team-a", "team-b", "other"} {
		for i := range 6 {
			labels := map[string]string{"team": fmt.Sprintf("t%d", i%3), "owner": "alice"}
			size := fmt.Sprint(i * 10)
			switch i {
			case 4:
				size = "big"
			case 5:
				delete(labels, "owner")
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", i), Labels: labels},
				Data: map[string]string{"size": size}}
			if err := cp.Client.Create(ctx, cm); err != nil {
				return err
			}
		}
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "preview-configmaps"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "namespaces"}, Verbs: []string{"get", "list"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "preview-configmaps"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kollect", Name: "preview-agent"}}}
	if err := cp.Client.Create(ctx, role); err != nil {
		return err
	}
	return cp.Client.Create(ctx, binding)
}

// bundle is a bundle of three targets: cms (ConfigMaps of team-a and team-b), widgets (a kind
// no CRD serves) and secrets (which the agent's service account may not list); inventory cms
// has the cms target and a rollup per team, inventory all every target but loose (which no
// inventory holds), inventory widgets the one not served.
const bundle = `
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: cm}
spec:
  target: {version: v1, kind: ConfigMap}
  attributes:
    - {name: team, jsonPath: "{.metadata.labels.team}"}
    - {name: size, jsonPath: "{.data.size}", type: int}
    - {name: owner, jsonPath: "{.metadata.labels.owner}"}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: cms}
spec:
  profileRef: {name: cm}
  namespaces: {include: [team-a, team-b]}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: widget}
spec:
  target: {group: example.com, version: v1, kind: Widget}
  attributes: [{name: color, jsonPath: "{.spec.color}"}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: widgets}
spec: {profileRef: {name: widget}}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: secret}
spec:
  target: {version: v1, kind: Secret}
  attributes: [{name: type, jsonPath: "{.type}"}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: secrets}
spec: {profileRef: {name: secret}}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: loose}
spec:
  profileRef: {name: cm}
  namespaces: {include: [other]}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectInventory
metadata: {name: cms}
spec:
  targets: [{name: cms}]
  rollups: [{name: per-team, groupBy: [team]}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectInventory
metadata: {name: all}
spec:
  targets: [{name: cms}, {name: widgets}, {name: secrets}]
---
apiVersion: kollect.dev/v1alpha1
kind: KollectInventory
metadata: {name: widgets}
spec:
  targets: [{name: widgets}]
`

// agentEnv is the Env of an agent in namespace kollect running as agentSA.
func agentEnv(t testing.TB) Env {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: agentSA}
	return envFor(t, cfg)
}

func envFor(t testing.TB, cfg *rest.Config) Env {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return Env{Dynamic: dyn, Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)), Cluster: "east",
		Allow: manifests.Allowlist{Namespaces: []string{"kollect"}, DefaultNamespace: "kollect"}, AgentVersion: "test"}
}

func targetOf(t *testing.T, res *fleetv1.PreviewResult, name string) *fleetv1.PreviewTarget {
	t.Helper()
	for _, pt := range res.GetTargets() {
		if pt.GetTarget() == name {
			return pt
		}
	}
	t.Fatalf("no target %s in %v", name, res.GetTargets())
	return nil
}

func attrOf(t *testing.T, pt *fleetv1.PreviewTarget, name string) *fleetv1.PreviewAttribute {
	t.Helper()
	for _, a := range pt.GetAttributes() {
		if a.GetName() == name {
			return a
		}
	}
	t.Fatalf("target %s has no attribute %s: %v", pt.GetTarget(), name, pt.GetAttributes())
	return nil
}

// TestPreviewCountsWhatAnExportWouldHold: per target the objects listed and matched, rows and
// failures; per attribute values, cardinality and errors naming objects; a kind without a CRD
// is not served and one the agent may not list is forbidden, neither failing the others.
func TestPreviewCountsWhatAnExportWouldHold(t *testing.T) {
	ctx := t.Context()
	res := Evaluate(ctx, &fleetv1.PreviewRequest{Id: "p1", Manifests: bundle}, agentEnv(t))
	if res.GetError() != "" {
		t.Fatalf("error: %s", res.GetError())
	}
	if res.GetPreviewId() != "p1" || res.GetCluster() != "east" || res.GetDistinctValuesLimit() != DefaultDistinctLimit || res.GetSamplesRefused() {
		t.Errorf("result header: %+v", res)
	}
	all := &corev1.ConfigMapList{}
	if err := cp.Client.List(ctx, all); err != nil {
		t.Fatal(err)
	}
	cms := targetOf(t, res, "kollect/cms")
	if cms.GetKindState() != fleetv1.PreviewKindState_PREVIEW_KIND_STATE_SERVED || cms.GetProfile() != "kollect/cm" || cms.GetKind() != "ConfigMap" {
		t.Errorf("cms: %v", cms)
	}
	if cms.GetObjectsListed() != int64(len(all.Items)) || cms.GetObjectsMatched() != 12 || cms.GetRows() != 8 || cms.GetFailed() != 4 {
		t.Errorf("cms: listed %d (cluster holds %d), matched %d, rows %d, failed %d; want 12, 8, 4",
			cms.GetObjectsListed(), len(all.Items), cms.GetObjectsMatched(), cms.GetRows(), cms.GetFailed())
	}
	var names []string
	for _, a := range cms.GetAttributes() {
		names = append(names, a.GetName())
	}
	if strings.Join(names, ",") != "team,size,owner" {
		t.Errorf("attributes %v, want the profile's order", names)
	}
	team, size, owner := attrOf(t, cms, "team"), attrOf(t, cms, "size"), attrOf(t, cms, "owner")
	if team.GetValues() != 8 || team.GetDistinctValues() != 3 || team.GetDistinctValuesCapped() || team.GetErrors() != 0 {
		t.Errorf("team: %v", team)
	}
	if size.GetValues() != 8 || size.GetDistinctValues() != 4 || size.GetErrors() != 2 || len(size.GetErrorSamples()) != 2 {
		t.Errorf("size: %v", size)
	}
	for _, e := range size.GetErrorSamples() {
		if !strings.HasSuffix(e.GetObject(), "/cm-4") || !strings.Contains(e.GetMessage(), `attribute size: want an integer, got a string that is not one`) {
			t.Errorf("size error sample %v", e)
		}
		// The hub gets the answer: the object's value ("big") is not in it.
		if strings.Contains(e.GetMessage(), "big") {
			t.Errorf("the error sample quotes the object's value: %v", e)
		}
	}
	if owner.GetValues() != 8 || owner.GetDistinctValues() != 1 || owner.GetErrors() != 2 ||
		owner.GetErrorSamples()[0].GetObject() != "team-a/cm-5" || !strings.Contains(owner.GetErrorSamples()[0].GetMessage(), "missing required attribute(s) owner") {
		t.Errorf("owner: %v", owner)
	}

	widgets := targetOf(t, res, "kollect/widgets")
	if widgets.GetKindState() != fleetv1.PreviewKindState_PREVIEW_KIND_STATE_NOT_SERVED || widgets.GetGroup() != "example.com" ||
		!strings.Contains(widgets.GetMessage(), "does not serve") {
		t.Errorf("widgets: %v", widgets)
	}
	secrets := targetOf(t, res, "kollect/secrets")
	if secrets.GetKindState() != fleetv1.PreviewKindState_PREVIEW_KIND_STATE_FORBIDDEN || !strings.Contains(secrets.GetMessage(), "forbidden") ||
		!strings.Contains(secrets.GetMessage(), "preview-agent") || secrets.GetRows() != 0 {
		t.Errorf("secrets: %v", secrets)
	}
	// A target no inventory holds is still counted; its rows are in no inventory's figures.
	if loose := targetOf(t, res, "kollect/loose"); loose.GetObjectsMatched() != 6 || loose.GetRows() != 4 {
		t.Errorf("loose: %v", loose)
	}
	if len(res.GetTargets()) != 4 {
		t.Errorf("%d targets, want 4", len(res.GetTargets()))
	}
}

// TestPreviewEstimatesTheExportTheSinkWrites: an inventory's rows (rollups included) and
// estimated bytes are those of the NDJSON document the snapshot sink renders for the rows the
// collect engine computes from the same objects.
func TestPreviewEstimatesTheExportTheSinkWrites(t *testing.T) {
	ctx := t.Context()
	env := agentEnv(t)
	res := Evaluate(ctx, &fleetv1.PreviewRequest{Id: "p2", Manifests: bundle}, env)
	if res.GetError() != "" {
		t.Fatal(res.GetError())
	}
	want := collectRows(t, "kollect/cms")
	opts, err := snapshot.NewOptions(kollectv1.Serialization{Format: kollectv1.FormatNDJSON}, kollectv1.Layout{}, kollectv1.FormatNDJSON, false)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := opts.Render(&export.Envelope{Cluster: "east", Inventory: "kollect/cms", Rows: want})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*fleetv1.PreviewInventory{}
	for _, inv := range res.GetInventories() {
		got[inv.GetInventory()] = inv
	}
	cms := got["kollect/cms"]
	if cms.GetRows() != 11 || cms.GetRows() != int64(len(want)) { // 8 rows and 3 per-team rollup rows
		t.Errorf("inventory cms: %d rows, want 11 (the collect engine gives %d)", cms.GetRows(), len(want))
	}
	if files := rendered.Files(); len(files) != 1 || cms.GetEstimatedBytes() != int64(files[0].Size) {
		t.Errorf("inventory cms: estimated %d bytes; the NDJSON sink writes %v", cms.GetEstimatedBytes(), files)
	}
	if all := got["kollect/all"]; all.GetRows() != 8 || strings.Join(all.GetTargets(), ",") != "kollect/cms,kollect/secrets,kollect/widgets" {
		t.Errorf("inventory all: %v", all)
	}
	if w := got["kollect/widgets"]; w == nil || w.GetRows() != 0 || w.GetEstimatedBytes() != 0 || len(res.GetInventories()) != 3 {
		t.Errorf("inventory widgets (its one kind not served): %v; %d inventories, want 3", w, len(res.GetInventories()))
	}
}

// collectRows computes an inventory's rows as `kollect collect` does, as an administrator.
func collectRows(t *testing.T, inventory string) []export.Row {
	t.Helper()
	objs, err := manifests.Decode(bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		u.SetNamespace("kollect")
	}
	cfg, err := offline.Load(objs)
	if err != nil {
		t.Fatal(err)
	}
	admin := envFor(t, cp.Config)
	jobs, err := cfg.Plan(inventory, offline.MapperResolver(admin.Mapper))
	if err != nil {
		t.Fatal(err)
	}
	s := offline.NewStream(jobs, "east", nil, offline.Hooks{})
	if errs := s.List(t.Context(), admin.Dynamic, 0, nil); len(errs) > 0 {
		t.Fatal(errs)
	}
	rows, _ := s.Finish()
	return rows
}

// TestPreviewSamplesOnlyWhenAllowed: without the agent's opt-in a request for samples is
// refused and the answer carries none; with it, the first rows in canonical order, at most 5,
// with their attributes exactly as exported.
func TestPreviewSamplesOnlyWhenAllowed(t *testing.T) {
	ctx := t.Context()
	env := agentEnv(t)
	res := Evaluate(ctx, &fleetv1.PreviewRequest{Id: "s1", Manifests: bundle, MaxSamples: 3}, env)
	if !res.GetSamplesRefused() || len(targetOf(t, res, "kollect/cms").GetSamples()) != 0 {
		t.Errorf("samples without --preview-samples: refused %v, %d samples", res.GetSamplesRefused(), len(targetOf(t, res, "kollect/cms").GetSamples()))
	}
	var raw []export.Row // the cms target's rows as exported, canonical order
	for _, r := range collectRows(t, "kollect/cms") {
		if r.Target == "kollect/cms" {
			raw = append(raw, r)
		}
	}
	env.Samples = true
	for _, asked := range []int32{0, 3, 50} {
		res := Evaluate(ctx, &fleetv1.PreviewRequest{Id: "s2", Manifests: bundle, MaxSamples: asked}, env)
		samples := targetOf(t, res, "kollect/cms").GetSamples()
		want := min(int(asked), MaxSamples)
		if res.GetSamplesRefused() || len(samples) != want {
			t.Errorf("asked %d: refused %v, %d samples, want %d", asked, res.GetSamplesRefused(), len(samples), want)
			continue
		}
		for i, s := range samples {
			if s.GetObject() != raw[i].Namespace+"/"+raw[i].Name || s.GetAttributesJson() != string(raw[i].Attributes) {
				t.Errorf("asked %d: sample %d = %s %s, want %s/%s %s", asked, i, s.GetObject(), s.GetAttributesJson(), raw[i].Namespace, raw[i].Name, raw[i].Attributes)
			}
		}
	}
}

// TestPreviewCapsDistinctValues: past the agent's limit distinct values stop being counted and
// the answer says so.
func TestPreviewCapsDistinctValues(t *testing.T) {
	env := agentEnv(t)
	env.DistinctLimit = 2
	res := Evaluate(t.Context(), &fleetv1.PreviewRequest{Manifests: bundle}, env)
	team := attrOf(t, targetOf(t, res, "kollect/cms"), "team")
	if res.GetDistinctValuesLimit() != 2 || team.GetDistinctValues() != 2 || !team.GetDistinctValuesCapped() {
		t.Errorf("limit %d, team %v; want 2 distinct, capped", res.GetDistinctValuesLimit(), team)
	}
	if owner := attrOf(t, targetOf(t, res, "kollect/cms"), "owner"); owner.GetDistinctValuesCapped() {
		t.Errorf("owner has one value and is capped: %v", owner)
	}
}

// TestPreviewRefusesWhatTheApplierRefuses: a bundle that does not decode, or holds an object
// outside the agent's allowlist, is answered with an error naming it and nothing evaluated.
func TestPreviewRefusesWhatTheApplierRefuses(t *testing.T) {
	env := agentEnv(t)
	for name, c := range map[string]struct{ manifests, want string }{
		"namespace": {bundle + "---\napiVersion: kollect.dev/v1alpha1\nkind: KollectProfile\nmetadata: {name: p, namespace: team-a}\nspec: {target: {version: v1, kind: Pod}, attributes: [{name: n, jsonPath: '{.metadata.name}'}]}\n",
			"KollectProfile team-a/p is refused by the agent: namespace team-a is not in the agent's allowlist (kollect)"},
		"kind":   {bundle + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "ConfigMap x is refused by the agent: ConfigMap is not a Kollect kind"},
		"decode": {"kind: [", "bundle manifests do not decode"},
	} {
		res := Evaluate(t.Context(), &fleetv1.PreviewRequest{Manifests: c.manifests}, env)
		if !strings.Contains(res.GetError(), c.want) || len(res.GetTargets()) != 0 || len(res.GetInventories()) != 0 {
			t.Errorf("%s: error %q, %d targets; want %q and nothing evaluated", name, res.GetError(), len(res.GetTargets()), c.want)
		}
	}
}

// TestPreviewHonoursTheDeadline: a request whose deadline has passed answers at once, its
// targets failed with the reason rather than counted in part silently.
func TestPreviewHonoursTheDeadline(t *testing.T) {
	res := Evaluate(t.Context(), &fleetv1.PreviewRequest{Manifests: bundle, Deadline: timestamppb.New(time.Now().Add(-time.Second))}, agentEnv(t))
	cms := targetOf(t, res, "kollect/cms")
	if cms.GetKindState() != fleetv1.PreviewKindState_PREVIEW_KIND_STATE_FAILED || !strings.Contains(cms.GetMessage(), "deadline") {
		t.Errorf("cms after the deadline: %v", cms)
	}
}

// TestPreviewWritesNothing: the API server's own request counters show no create, update,
// patch or delete of any resource a preview touches while previews run, samples included.
func TestPreviewWritesNothing(t *testing.T) {
	ctx := t.Context()
	resources := []string{"configmaps", "secrets", "namespaces"}
	for _, k := range kollectv1.Kinds {
		resources = append(resources, k.Resource)
	}
	before, err := cp.Writes(ctx, resources...)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := cp.Lists(ctx, "configmaps")
	if err != nil {
		t.Fatal(err)
	}
	env := agentEnv(t)
	env.Samples = true
	res := Evaluate(ctx, &fleetv1.PreviewRequest{Manifests: bundle, MaxSamples: 5}, env)
	if res.GetError() != "" || targetOf(t, res, "kollect/cms").GetRows() != 8 {
		t.Fatalf("preview: %v", res)
	}
	after, err := cp.Writes(ctx, resources...)
	if err != nil {
		t.Fatal(err)
	}
	listsAfter, err := cp.Lists(ctx, "configmaps")
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the API server served %d writes during a preview", after-before)
	}
	if listsAfter == lists { // the counters do see the preview's reads
		t.Errorf("no ConfigMap list counted: the counters are not this API server's")
	}
}

// TestPreviewHasNoSamplesOfRowsNoSinkGets: a target whose only inventory exports its rollups
// alone (rawRows: Exclude) sends no raw row to any sink, so a preview gives no sample of it,
// though it still counts its rows; held by an inventory of raw rows as well, it has samples.
func TestPreviewHasNoSamplesOfRowsNoSinkGets(t *testing.T) {
	env := agentEnv(t)
	env.Samples = true
	rollupOnly := strings.Replace(bundle, "rollups: [{name: per-team, groupBy: [team]}]",
		"rollups: [{name: per-team, groupBy: [team]}]\n  rawRows: Exclude", 1)
	res := Evaluate(t.Context(), &fleetv1.PreviewRequest{Manifests: rollupOnly, MaxSamples: 2}, env)
	if n := len(targetOf(t, res, "kollect/cms").GetSamples()); n != 2 {
		t.Errorf("cms, also in inventory all (raw rows): %d samples, want 2", n)
	}
	alone := strings.Replace(rollupOnly, "targets: [{name: cms}, {name: widgets}, {name: secrets}]",
		"targets: [{name: widgets}, {name: secrets}]", 1)
	res = Evaluate(t.Context(), &fleetv1.PreviewRequest{Manifests: alone, MaxSamples: 2}, env)
	cms := targetOf(t, res, "kollect/cms")
	if len(cms.GetSamples()) != 0 || cms.GetRows() == 0 {
		t.Errorf("cms, only in a rollup-only inventory: %d samples and %d rows, want none and its rows", len(cms.GetSamples()), cms.GetRows())
	}
}
