package collector

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kollect.dev/agent/internal/profile"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Secrets read as they are are confined to namespaces the cluster admin opted in.
//
// Why: reading Helm releases needs get, list and watch on Secrets (the chart's
// rbac.helmReleases), and RBAC cannot narrow that grant to release Secrets. A decoding profile
// is confined by the field selector and the decoder (decode.go); any other profile on Secrets
// would read, and export, every Secret the agent may read — a tenant's profile included. So
// such a profile's targets select only in namespaces labelled
// kollect.dev/secret-extraction=allow, as if their namespace selector required that label:
// Namespaces are cluster-scoped, so tenants cannot label them. A decoding profile sharing the
// kind's watch keeps reading releases everywhere.
//
// The rule lives in the target's selection, so every evaluation of a target applies it: the
// agent's watches, previews the hub asks of the agent (which run with the agent's
// credentials), and the CLI's render and collect, which show what the agent would export.

// coreSecret is the kind the rule confines.
var coreSecret = schema.GroupKind{Kind: "Secret"}

// readsSecretsAsTheyAre reports whether a profile of kind gvk reads core Secrets without
// decoding them.
func readsSecretsAsTheyAre(gvk schema.GroupVersionKind, prof *profile.Compiled) bool {
	return gvk.GroupKind() == coreSecret && (prof == nil || prof.Decode == "")
}

// SecretsConfined reports whether the target reads Secrets as they are, and so selects only in
// namespaces labelled kollect.dev/secret-extraction=allow.
func (t *Target) SecretsConfined() bool { return t.secretsConfined }

// secretExtractionAllowed reports whether the cluster admin opted namespace ns in. A namespace
// whose labels are unknown (not seen yet, or deleted) is not.
func secretExtractionAllowed(ns string, nsLabels func(string) (labels.Set, bool)) bool {
	if nsLabels == nil {
		return false
	}
	set, known := nsLabels(ns)
	return known && labelsAllowSecrets(set)
}

func labelsAllowSecrets(set labels.Set) bool {
	return set[kollectv1.LabelSecretExtraction] == kollectv1.SecretExtractionAllowed
}

// selectsByNamespaceLabels reports whether what the target selects follows namespaces' labels:
// a namespace selector, or the opt-in to read Secrets.
func (t *Target) selectsByNamespaceLabels() bool { return t.nsSelector != nil || t.secretsConfined }

// labelsSelect reports whether a namespace with these labels passes the target's label-based
// namespace selection (its selector and the Secrets opt-in); include and exclude patterns are
// not applied.
func (t *Target) labelsSelect(set labels.Set) bool {
	if t.secretsConfined && !labelsAllowSecrets(set) {
		return false
	}
	return t.nsSelector == nil || t.nsSelector.Matches(set)
}
