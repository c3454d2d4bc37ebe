package cli

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"kollect.dev/agent/internal/cli/cmdutil"
	"kollect.dev/agent/internal/cli/manifest"
	"kollect.dev/agent/internal/cli/offline"
	"kollect.dev/agent/internal/cli/output"
	"kollect.dev/agent/internal/export"
)

type collectFlags struct {
	rowFlags
	kubeconfig string
	contexts   []string
	timeout    time.Duration
}

func newCollectCmd(env *Env) *cobra.Command {
	var f collectFlags
	c := &cobra.Command{
		Use:   "collect CONFIG_FILE|DIR|- ...",
		Short: "Collect rows once from one or several clusters, no operator needed",
		Long: "collect runs the profiles, targets and inventories of the given files against the clusters of kubeconfig " +
			"contexts (glob patterns allowed; the current context by default) and prints the rows, each labelled with its " +
			"context's name as the cluster. It lists objects once per kind and cluster with your own credentials. " +
			"A cluster that cannot be reached makes the exit code 2; the other clusters' rows are still printed.",
		Example: "  kollect collect config.yaml --context 'prod-*' -o ndjson",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			docs, err := manifest.Load(args, env.In)
			if err != nil {
				return usage(err)
			}
			return collect(cmd.Context(), env, docs, f)
		},
	}
	f.bind(c)
	c.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "Path of the kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
	c.Flags().StringArrayVar(&f.contexts, "context", nil, "Kubeconfig context to collect from; a glob; repeatable (default: the current context).")
	c.Flags().DurationVar(&f.timeout, "timeout", 2*time.Minute, "Time allowed per cluster.")
	_ = c.RegisterFlagCompletionFunc("context", func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		raw, err := loadingRules(f.kubeconfig).Load()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var names []string
		for n := range raw.Contexts {
			names = append(names, n)
		}
		sort.Strings(names)
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	return c
}

func loadingRules(explicit string) *clientcmd.ClientConfigLoadingRules {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = explicit
	return rules
}

// contextsMatching expands patterns against the kubeconfig; no pattern means the current one.
func contextsMatching(rules *clientcmd.ClientConfigLoadingRules, patterns []string) ([]string, error) {
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	if len(patterns) == 0 {
		if raw.CurrentContext == "" {
			return nil, errors.New("the kubeconfig has no current context: pass --context")
		}
		return []string{raw.CurrentContext}, nil
	}
	var names []string
	for n := range raw.Contexts {
		names = append(names, n)
	}
	sort.Strings(names)
	seen := map[string]bool{}
	var out []string
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("context pattern %q: %w", p, err)
		}
		matched := false
		for _, n := range names {
			if ok, _ := path.Match(p, n); ok {
				matched = true
				if !seen[n] {
					seen[n] = true
					out = append(out, n)
				}
			}
		}
		if !matched {
			return nil, fmt.Errorf("no kubeconfig context matches %q (have: %s)", p, strings.Join(names, ", "))
		}
	}
	return out, nil
}

func collect(ctx context.Context, env *Env, docs []*manifest.Doc, f collectFlags) error {
	objs := make([]*unstructured.Unstructured, len(docs))
	for i, d := range docs {
		objs[i] = d.Object
	}
	cfg, err := offline.Load(objs)
	if err != nil {
		return findings("%v", err)
	}
	rules := loadingRules(f.kubeconfig)
	contexts, err := contextsMatching(rules, f.contexts)
	if err != nil {
		return usage(err)
	}
	prog := &progress{env: env}
	var rows []export.Row
	var unreachable []string
	failed := 0
	for i, name := range contexts {
		prog.set("[%d/%d] %s", i+1, len(contexts), name)
		cctx, cancel := context.WithTimeout(ctx, f.timeout)
		got, failures, err := collectContext(cctx, rules, name, cfg, f.inventory, func(msg string) {
			prog.set("[%d/%d] %s: %s", i+1, len(contexts), name, msg)
		})
		cancel()
		if err != nil {
			prog.clear()
			fmt.Fprintf(env.Err, "context %s: %v\n", name, err)
			unreachable = append(unreachable, name)
			continue
		}
		rows = append(rows, got...)
		for _, fl := range failures {
			prog.clear()
			failed++
			fmt.Fprintf(env.Err, "context %s: %s: target %s: not exported: %v\n", name, describe(fl.Object), fl.Target, fl.Err)
		}
	}
	prog.clear()
	if err := output.Write(env.Out, f.output, rows); err != nil {
		return err
	}
	if len(unreachable) > 0 {
		return &cmdutil.ExitError{Code: ExitUsage, Err: fmt.Errorf("could not collect from %s", strings.Join(unreachable, ", "))}
	}
	if failed > 0 {
		return findings("%d objects not exported", failed)
	}
	return nil
}

// collectContext lists what the plan needs from one cluster and renders its rows.
func collectContext(ctx context.Context, rules *clientcmd.ClientConfigLoadingRules, name string, cfg *offline.Config, inventory string,
	step func(string)) ([]export.Row, []offline.Failure, error) {
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: name}).ClientConfig()
	if err != nil {
		return nil, nil, err
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 50, 100
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	jobs, err := cfg.Plan(inventory, offline.MapperResolver(mapper))
	if err != nil {
		return nil, nil, err
	}
	nsLabels, err := offline.NamespaceLabels(ctx, dyn)
	if err != nil {
		nsLabels = nil // every namespace unlabelled, as when the caller may not list them
	}
	// Objects are projected a page at a time: the CLI never holds a whole kind.
	stream := offline.NewStream(jobs, name, nsLabels, offline.Hooks{})
	for _, k := range stream.Kinds() {
		step("listing " + resourceName(k.Resource))
		err := offline.ListPages(ctx, dyn.Resource(k.Resource), offline.PageSize, func(page []*unstructured.Unstructured) { stream.Add(k.GVK, page) })
		if err != nil {
			return nil, nil, fmt.Errorf("listing %s: %w", resourceName(k.Resource), err)
		}
	}
	rows, failures := stream.Finish()
	return rows, failures, nil
}

// resourceName is kubectl's resource.version.group form.
func resourceName(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource + "." + gvr.Version
	}
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}

// progress draws one status line on a terminal and nothing otherwise.
type progress struct {
	env   *Env
	drawn bool
}

func (p *progress) set(format string, args ...any) {
	if !p.env.Terminal {
		return
	}
	fmt.Fprintf(p.env.Err, "\r\033[K"+format, args...)
	p.drawn = true
}

func (p *progress) clear() {
	if p.drawn {
		fmt.Fprint(p.env.Err, "\r\033[K")
		p.drawn = false
	}
}
