package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kollect.dev/agent/internal/cli/manifest"
	"kollect.dev/agent/internal/cli/offline"
	"kollect.dev/agent/internal/cli/output"
	"kollect.dev/agent/internal/collector"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// rowFlags are the flags render and collect share.
type rowFlags struct {
	output, inventory string
}

func (f *rowFlags) bind(c *cobra.Command) {
	c.Flags().StringVarP(&f.output, "output", "o", "table", "Output format: "+strings.Join(output.Formats, ", ")+".")
	c.Flags().StringVar(&f.inventory, "inventory", "", "Only this inventory (namespace/name, or name for a cluster inventory); "+
		"when the files hold no inventory, the name rows carry.")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(output.Formats, cobra.ShellCompDirectiveNoFileComp))
}

func (f *rowFlags) check() error {
	for _, o := range output.Formats {
		if f.output == o {
			return nil
		}
	}
	return usage(fmt.Errorf("unknown output format %q (want one of %s)", f.output, strings.Join(output.Formats, ", ")))
}

func newRenderCmd(env *Env) *cobra.Command {
	var f rowFlags
	var cluster string
	c := &cobra.Command{
		Use:   "render FILE|DIR|- ...",
		Short: "Run profiles and targets over objects in files and print the rows an inventory would export",
		Long: "render reads Kollect profiles, targets and inventories together with ordinary objects (any kind, YAML or " +
			"JSON, lists included, for example the output of kubectl get -o yaml) and prints the rows each inventory would " +
			"export, in export order. Objects whose extraction fails are reported with file:line and make the exit code 1, " +
			"as the agent leaves them out of the export.",
		Example: "  kollect render profile.yaml deployments.yaml\n  kubectl get deploy -A -o yaml | kollect render config.yaml - -o ndjson",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			docs, err := manifest.Load(args, env.In)
			if err != nil {
				return usage(err)
			}
			return render(env, docs, f, cluster)
		},
	}
	f.bind(c)
	c.Flags().StringVar(&cluster, "cluster", "", "Cluster name stamped on the rows.")
	return c
}

func render(env *Env, docs []*manifest.Doc, f rowFlags, cluster string) error {
	objs := make([]*unstructured.Unstructured, len(docs))
	where := map[*unstructured.Unstructured]*manifest.Doc{}
	for i, d := range docs {
		objs[i] = d.Object
		where[d.Object] = d
	}
	cfg, err := offline.Load(objs)
	if err != nil {
		return findings("%v", err)
	}
	byGVK := map[schema.GroupVersionKind][]*unstructured.Unstructured{}
	nsLabels := map[string]labels.Set{}
	crdScope := map[schema.GroupKind]bool{}
	for _, o := range cfg.Others {
		byGVK[o.GroupVersionKind()] = append(byGVK[o.GroupVersionKind()], o)
		switch o.GroupVersionKind().GroupKind() {
		case schema.GroupKind{Kind: "Namespace"}:
			nsLabels[o.GetName()] = o.GetLabels()
		case schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, crd) == nil {
				crdScope[schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}] = crd.Spec.Scope == apiextensionsv1.NamespaceScoped
			}
		}
	}
	// Without an API server the scope of a kind comes from a CRD in the files, the built-in
	// list, or the objects themselves.
	resolve := func(gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool, error) {
		gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: strings.ToLower(gvk.Kind) + "s"}
		if n, ok := crdScope[gvk.GroupKind()]; ok {
			return gvr, n, nil
		}
		if builtinClusterScoped[gvk.GroupKind()] {
			return gvr, false, nil
		}
		for _, o := range byGVK[gvk] {
			if o.GetNamespace() != "" {
				return gvr, true, nil
			}
		}
		return gvr, len(byGVK[gvk]) == 0, nil
	}
	jobs, err := cfg.Plan(f.inventory, resolve)
	if err != nil {
		return findings("%v", err)
	}
	noteSecretsConfined(env.Err, jobs)
	rows, failures := offline.Rows(jobs, cluster, func(gvk schema.GroupVersionKind) []*unstructured.Unstructured { return byGVK[gvk] },
		func(ns string) (labels.Set, bool) { l, ok := nsLabels[ns]; return l, ok })
	if err := output.Write(env.Out, f.output, rows); err != nil {
		return err
	}
	for _, fl := range failures {
		fmt.Fprintf(env.Err, "%s: %s: target %s: not exported: %v\n", where[fl.Object].Where(), describe(fl.Object), fl.Target, fl.Err)
	}
	if len(failures) > 0 {
		return findings("%d objects not exported", len(failures))
	}
	return nil
}

// noteSecretsConfined says which targets read Secrets only in namespaces opted in to Secret
// extraction: from files, a Secret renders no row unless a Namespace object in them carries
// the label, which would otherwise look like a selection that matched nothing.
func noteSecretsConfined(w io.Writer, jobs []offline.Job) {
	seen := map[collector.TargetKey]bool{}
	for _, j := range jobs {
		if t := j.Target; t.SecretsConfined() && !seen[t.Key] {
			seen[t.Key] = true
			fmt.Fprintf(w, "note: target %s reads Secrets only in namespaces labelled %s=%s, as the agent does "+
				"(a Namespace object in the files with that label opts its namespace in)\n",
				t.Key, kollectv1.LabelSecretExtraction, kollectv1.SecretExtractionAllowed)
		}
	}
}
