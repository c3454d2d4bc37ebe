package hubclient

import (
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/agent/internal/hubclient/manifests"
	kollectv1 "kollect.dev/api/v1alpha1"
)

// Labels and annotations on every object the hub manages.
const (
	FieldManager       = "kollect-hub"
	LabelManagedBy     = kollectv1.LabelManagedBy
	LabelBundle        = "kollect.dev/bundle"
	AnnotationRevision = "kollect.dev/bundle-revision"
	AnnotationDigest   = "kollect.dev/bundle-digest"
	managedByValue     = kollectv1.ManagedByHub
	defaultHeartbeat   = 15 * time.Second
	// maxReconnectInterval caps the wait between rounds over every hub URL: an agent that lost
	// every replica is back within it of one returning.
	maxReconnectInterval = 8 * time.Second
)

// Options configure the hub connection.
type Options struct {
	// URLs of the hub, https://host:port: one, or one per replica (see hubdial).
	URLs []string
	// CAFingerprint pins the hub's CA ("sha256:<hex>" of its DER); CAFile trusts a PEM bundle
	// instead. With neither, the system roots verify the hub. The host name of URL is checked
	// in every case (see hubdial).
	CAFingerprint string
	CAFile        string
	// Cluster is the agent's cluster name; Labels are the cluster's labels for bundle selection.
	Cluster string
	Labels  map[string]string
	// BootstrapSecret holds the bootstrap token under key "token"; CredentialSecret is where the
	// agent keeps its credential (key "credential"). Both in the agent's namespace.
	BootstrapSecret  types.NamespacedName
	CredentialSecret types.NamespacedName
	// ReplaceExisting takes over the cluster name from a previous agent (token must allow it).
	ReplaceExisting bool
	// AllowedNamespaces are where namespaced hub objects may be applied ("*": all but the
	// agent's own); empty admits none.
	AllowedNamespaces []string
	// DefaultNamespace receives namespaced objects that name none.
	DefaultNamespace string
	// AllowScopes accepts KollectScopes and KollectClusterScopes from bundles; off, they are
	// refused: guardrails are the cluster admin's (--hub-allow-scopes).
	AllowScopes bool
	// PreviewSamples lets answers to bundle previews carry a few sample rows (--preview-samples);
	// without it they carry counts only.
	PreviewSamples bool
	// AgentVersion is reported in heartbeats.
	AgentVersion string
	Log          logr.Logger
}

// Allowlist is where bundles may place objects, for the applier and for previews.
func (o Options) Allowlist() manifests.Allowlist {
	return manifests.Allowlist{Namespaces: o.AllowedNamespaces, DefaultNamespace: o.DefaultNamespace,
		Own: o.BootstrapSecret.Namespace, Guardrails: o.AllowScopes}
}
