package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/agent/internal/hubclient"
	"kollect.dev/agent/internal/hubclient/manifests"
	"kollect.dev/agent/internal/hubdial"
	"kollect.dev/api/version"
)

type hubFlags struct {
	urls                                   urlList
	caFingerprint, caFile                  string
	labels, namespaces, defaultNamespace   string
	bootstrapSecret, credentialSecret, own string
	replace, previewSamples, allowScopes   bool
}

func (h *hubFlags) bind(fs *flag.FlagSet) {
	fs.Var(&h.urls, "hub-url", "`URL` of the fleet hub (https://host:port); empty runs the agent standalone. A hub of several replicas: every replica's URL, comma-separated or the flag repeated; the agent starts with a random one and moves to the next at once when it fails.")
	fs.StringVar(&h.caFingerprint, "hub-ca-fingerprint", "", "Pin the hub's CA: sha256:<hex> as the hub prints it.")
	fs.StringVar(&h.caFile, "hub-ca-file", "", "PEM file of the CA that signed the hub's certificate (instead of a pin).")
	fs.StringVar(&h.labels, "cluster-labels", "", "Labels of this cluster for bundle selection: k=v,k2=v2.")
	fs.StringVar(&h.namespaces, "hub-namespaces", "", "Namespaces hub bundles may write to (comma-separated; * for every namespace but the agent's own). Empty admits no namespaced bundle object; the agent's own namespace is never admitted.")
	fs.StringVar(&h.defaultNamespace, "hub-default-namespace", "", "Namespace for bundle objects that name none; one of --hub-namespaces (default: the first listed).")
	fs.StringVar(&h.own, "pod-namespace", os.Getenv("POD_NAMESPACE"), "The agent's own namespace, where the hub bootstrap and credential Secrets live (default $POD_NAMESPACE).")
	fs.StringVar(&h.bootstrapSecret, "hub-bootstrap-secret", "kollect-hub-bootstrap", "Secret (in the agent's namespace) holding the bootstrap token under key token.")
	fs.StringVar(&h.credentialSecret, "hub-credential-secret", "kollect-hub-credential", "Secret (in the agent's namespace) where the agent keeps its hub credential.")
	fs.BoolVar(&h.previewSamples, "preview-samples", false, "Send up to 5 sample rows per target in answers to bundle previews (at most what the preview asks for, as the sink would receive them); without it previews carry counts only.")
	fs.BoolVar(&h.allowScopes, "hub-allow-scopes", false, "Accept KollectScopes and KollectClusterScopes from hub bundles; without it they are refused: what teams and sinks may do on this cluster stays its admin's.")
	fs.BoolVar(&h.replace, "hub-replace-existing", false, "Take over this cluster name from a previous agent (the token must allow it).")
}

func (h *hubFlags) options() (*hubclient.Options, error) {
	if len(h.urls) == 0 {
		return nil, nil
	}
	if h.own == "" {
		return nil, errors.New("--pod-namespace (or POD_NAMESPACE) is required with --hub-url")
	}
	labels := map[string]string{}
	for _, kv := range splitList(h.labels) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--cluster-labels: %q is not key=value", kv)
		}
		labels[k] = v
	}
	namespaces := splitList(h.namespaces)
	def, err := defaultNamespace(namespaces, h.defaultNamespace, h.own)
	if err != nil {
		return nil, err
	}
	return &hubclient.Options{
		URLs: h.urls, CAFingerprint: h.caFingerprint, CAFile: h.caFile, Labels: labels,
		BootstrapSecret:  types.NamespacedName{Namespace: h.own, Name: h.bootstrapSecret},
		CredentialSecret: types.NamespacedName{Namespace: h.own, Name: h.credentialSecret},
		ReplaceExisting:  h.replace, PreviewSamples: h.previewSamples, AllowScopes: h.allowScopes,
		AllowedNamespaces: namespaces, DefaultNamespace: def, AgentVersion: version.String(),
	}, nil
}

// defaultNamespace checks --hub-namespaces against the agent's own namespace (never a bundle's)
// and picks where objects that name no namespace go: --hub-default-namespace, which must be
// admitted, or the first namespace listed by name.
func defaultNamespace(namespaces []string, def, own string) (string, error) {
	if slices.Contains(namespaces, own) {
		return "", fmt.Errorf("--hub-namespaces lists %s, the agent's own namespace: it holds the agent's hub credentials and is never open to bundles", own)
	}
	if def == "" {
		for _, ns := range namespaces {
			if ns != manifests.AllNamespaces {
				return ns, nil
			}
		}
		return "", nil
	}
	if def == own {
		return "", fmt.Errorf("--hub-default-namespace %s is the agent's own namespace, which bundles never reach", def)
	}
	if !slices.Contains(namespaces, def) && !slices.Contains(namespaces, manifests.AllNamespaces) {
		return "", fmt.Errorf("--hub-default-namespace %s is not one of --hub-namespaces (%s)", def, strings.Join(namespaces, ","))
	}
	return def, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// urlList is --hub-url: comma-separated, and repeatable.
type urlList []string

func (u *urlList) String() string { return strings.Join(*u, ",") }

func (u *urlList) Set(v string) error {
	for _, p := range hubdial.SplitURLs(v) {
		if !slices.Contains(*u, p) {
			*u = append(*u, p)
		}
	}
	return nil
}
