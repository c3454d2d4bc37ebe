package manifests

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// Decode reads multi-document YAML (or JSON) into objects, skipping empty documents.
func Decode(manifests string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// AllNamespaces in Allowlist.Namespaces admits every namespace but the agent's own.
const AllNamespaces = "*"

// Allowlist is where the hub may place objects on this agent's cluster.
type Allowlist struct {
	// Namespaces are where namespaced objects may land, as the cluster admin listed them
	// (--hub-namespaces); "*" admits every namespace but Own. Empty admits none: a bundle
	// reaches only namespaces its cluster's admin handed to the fleet.
	Namespaces []string
	// DefaultNamespace receives namespaced objects that name none.
	DefaultNamespace string
	// Own is the agent's namespace, where its hub bootstrap and credential Secrets live. No
	// bundle object lands there, whatever Namespaces says: a sink placed beside those Secrets
	// could name them.
	Own string
	// Guardrails admits the guardrail kinds (KollectScope, KollectClusterScope): the agent's
	// owner lets the hub set what teams and sinks may do on this cluster (--hub-allow-scopes).
	Guardrails bool
}

// Holds reports whether an existing object lies where this agent's bundles may place
// objects: cluster-scoped, or in an admitted namespace other than Own. The applier prunes only
// such objects: a hub-managed object in another namespace belongs to another agent sharing
// the cluster (one per team namespace, say), or to a namespace its admin has since taken
// back from the fleet, and is not this agent's to delete.
func (a Allowlist) Holds(u *unstructured.Unstructured) bool {
	ns := u.GetNamespace()
	if ns == "" {
		return true
	}
	return ns != a.Own && (slices.Contains(a.Namespaces, AllNamespaces) || slices.Contains(a.Namespaces, ns))
}

// Refuse explains why an object is outside the allowlist, or returns "". An admitted
// namespaced object that names no namespace is given the default one.
func (a Allowlist) Refuse(u *unstructured.Unstructured) string {
	// The allowlist of kinds is kollectv1.Kinds: kollect.dev only, by design.
	gvk := u.GroupVersionKind()
	info, ok := kollectv1.LookupKind(gvk.Kind)
	if gvk.Group != kollectv1.GroupVersion.Group || !ok {
		return fmt.Sprintf("%s is not a Kollect kind: the hub may only manage kollect.dev objects", gvk.GroupKind())
	}
	if info.Guardrail && !a.Guardrails {
		return gvk.Kind + " is the cluster admin's: this agent accepts no scopes from the hub (its owner may allow them with --hub-allow-scopes)"
	}
	if u.GetName() == "" {
		return "object has no name"
	}
	if !info.Namespaced {
		if u.GetNamespace() != "" {
			return gvk.Kind + " is cluster-scoped and must not name a namespace"
		}
		return ""
	}
	ns := u.GetNamespace()
	if ns == "" {
		ns = a.DefaultNamespace
	}
	if ns == "" {
		return "namespaced object without a namespace, and the agent has no default namespace"
	}
	if ns == a.Own {
		return fmt.Sprintf("namespace %s is the agent's own: it holds the agent's hub credentials, and no bundle object may land there", ns)
	}
	if len(a.Namespaces) == 0 {
		return "this agent accepts no namespaced objects from the hub: its owner lists the namespaces bundles may use with --hub-namespaces"
	}
	if !slices.Contains(a.Namespaces, AllNamespaces) && !slices.Contains(a.Namespaces, ns) {
		return fmt.Sprintf("namespace %s is not in the agent's allowlist (%s)", ns, strings.Join(a.Namespaces, ", "))
	}
	u.SetNamespace(ns)
	return ""
}
