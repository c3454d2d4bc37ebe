package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/agent/internal/cli/manifest"
	kollectschema "kollect.dev/agent/internal/cli/schema"
	"kollect.dev/agent/internal/scope"
	kollectwebhook "kollect.dev/agent/internal/webhook"
	kollectv1 "kollect.dev/api/v1alpha1"
)

func newValidateCmd(env *Env) *cobra.Command {
	var tenantMode bool
	c := &cobra.Command{
		Use:   "validate FILE|DIR|- ...",
		Short: "Check Kollect manifests offline: CRD schema and CEL rules, then the admission webhook's checks",
		Long: "validate reads Kollect objects from YAML or JSON files and reports, with file:line, what the API server " +
			"and the agent's admission webhook would refuse: schema and x-kubernetes-validations errors, CEL and JSONPath " +
			"compile errors, scope violations (against the scopes in the same files), sinks of the wrong family. " +
			"Other kinds are skipped. References to objects that are not in the files are warnings.",
		Example: "  kollect validate docs/examples/\n  kubectl get kollect -A -o yaml | kollect validate -",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			docs, err := manifest.Load(args, env.In)
			if err != nil {
				return usage(err)
			}
			return validateDocs(cmd.Context(), env, docs, tenantMode)
		},
	}
	c.Flags().BoolVar(&tenantMode, "tenant-mode", false, "Judge scopes as an agent in tenant mode (the agent's default) would if the files held every scope: no KollectScope, nothing allowed. Off by default, since the scopes usually live in the cluster, not in the files.")
	return c
}

var kollectScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := kollectv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

func validateDocs(ctx context.Context, env *Env, docs []*manifest.Doc, tenantMode bool) error {
	sv, err := kollectschema.New()
	if err != nil {
		return err
	}
	lookup := newFileLookup(docs, tenantMode)
	checked, problems := 0, 0
	for _, d := range docs {
		gvk := d.Object.GroupVersionKind()
		if gvk.Group != kollectv1.GroupVersion.Group {
			continue
		}
		checked++
		what := describe(d.Object)
		report := func(errs field.ErrorList) {
			for _, e := range errs {
				problems++
				fmt.Fprintf(env.Out, "%s: %s: %s\n", d.WhereField(e.Field), what, e.Error())
			}
		}
		if !sv.Known(gvk) {
			report(field.ErrorList{field.NotSupported[string](field.NewPath("apiVersion"), gvk.GroupVersion().String()+" "+gvk.Kind, nil)})
			continue
		}
		if errs := sv.Validate(ctx, d.Object); len(errs) > 0 {
			report(errs)
			continue // the webhook never sees what the schema refuses
		}
		obj, err := kollectScheme.New(gvk)
		if err != nil {
			return err
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object.Object, obj); err != nil {
			report(field.ErrorList{field.Invalid(field.NewPath("spec"), nil, err.Error())})
			continue
		}
		res, err := kollectwebhook.Validate(ctx, obj, lookup)
		if err != nil {
			return err
		}
		report(res.Errors)
		for _, w := range res.Warnings {
			fmt.Fprintf(env.Out, "%s: %s: warning: %s\n", d.Where(), what, w)
		}
	}
	if problems > 0 {
		return findings("%d problems in %d Kollect objects", problems, checked)
	}
	fmt.Fprintf(env.Err, "%d Kollect objects valid\n", checked)
	return nil
}

func describe(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetKind() + " " + u.GetName()
	}
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// fileLookup answers the webhook's questions from the files being validated.
type fileLookup struct {
	profiles   map[types.NamespacedName]*kollectv1.KollectProfile
	sinks      map[types.NamespacedName][]kollectv1.SinkFamily
	scopes     scope.Set
	nsLabels   map[string]labels.Set
	namespaced map[schema.GroupKind]bool
}

func newFileLookup(docs []*manifest.Doc, tenantMode bool) *fileLookup {
	l := &fileLookup{profiles: map[types.NamespacedName]*kollectv1.KollectProfile{}, sinks: map[types.NamespacedName][]kollectv1.SinkFamily{},
		scopes: scope.Set{TenantMode: tenantMode}, nsLabels: map[string]labels.Set{}, namespaced: map[schema.GroupKind]bool{}}
	for _, d := range docs {
		u := d.Object
		nn := types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}
		gk := u.GroupVersionKind().GroupKind()
		switch {
		case gk.Group == kollectv1.GroupVersion.Group && gk.Kind == "KollectProfile":
			p := &kollectv1.KollectProfile{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p) == nil {
				l.profiles[nn] = p
			}
		case gk.Group == kollectv1.GroupVersion.Group && strings.HasSuffix(gk.Kind, "Sink"):
			fam := kollectv1.SinkFamily(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(gk.Kind, "Kollect"), "Sink")))
			l.sinks[nn] = append(l.sinks[nn], fam)
		case gk.Group == kollectv1.GroupVersion.Group && gk.Kind == "KollectScope":
			s := kollectv1.KollectScope{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s) == nil {
				l.scopes.Scopes = append(l.scopes.Scopes, s)
			}
		case gk.Group == kollectv1.GroupVersion.Group && gk.Kind == "KollectClusterScope":
			s := kollectv1.KollectClusterScope{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s) == nil {
				l.scopes.ClusterScopes = append(l.scopes.ClusterScopes, s)
			}
		case gk == schema.GroupKind{Kind: "Namespace"}:
			l.nsLabels[u.GetName()] = u.GetLabels()
		case gk == schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd) == nil {
				l.namespaced[schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}] = crd.Spec.Scope == apiextensionsv1.NamespaceScoped
			}
		}
	}
	return l
}

func (l *fileLookup) Profile(_ context.Context, ns, name string) (*kollectv1.KollectProfile, error) {
	return l.profiles[types.NamespacedName{Namespace: ns, Name: name}], nil
}

func (l *fileLookup) SinkFamilies(_ context.Context, ns, name string) ([]kollectv1.SinkFamily, error) {
	return l.sinks[types.NamespacedName{Namespace: ns, Name: name}], nil
}

func (l *fileLookup) Scopes(context.Context) (scope.Set, error) { return l.scopes, nil }

func (l *fileLookup) NamespaceLabels(_ context.Context, ns string) (labels.Set, error) {
	return l.nsLabels[ns], nil
}

// Namespaced knows CRDs in the files and the built-in cluster-scoped kinds; everything else
// is assumed namespaced, as the webhook does for kinds it does not know.
func (l *fileLookup) Namespaced(gk schema.GroupKind) (bool, bool) {
	if n, ok := l.namespaced[gk]; ok {
		return n, true
	}
	if builtinClusterScoped[gk] {
		return false, true
	}
	return true, false
}

var builtinClusterScoped = map[schema.GroupKind]bool{
	{Kind: "Namespace"}: true, {Kind: "Node"}: true, {Kind: "PersistentVolume"}: true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}: true, {Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}: true, {Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}: true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}: true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:   true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                              true, {Group: "scheduling.k8s.io", Kind: "PriorityClass"}: true,
}
