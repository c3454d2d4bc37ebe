package v1alpha1

// Labels that carry a contract between the hub, the agent and the cluster admin.
const (
	// LabelManagedBy marks who manages an object: ManagedByHub on every object the agent
	// applied from a hub bundle (the agent prunes only those, and takes over no other).
	LabelManagedBy = "kollect.dev/managed-by"
	// ManagedByHub is LabelManagedBy's value on hub-delivered objects.
	ManagedByHub = "kollect-hub"

	// LabelHubSinks on a Secret, set to HubSinksAllowed by the cluster admin, lets sinks
	// delivered by the hub read it. A hub-delivered sink reads no other Secret: a bundle
	// cannot point a sink at the agent's own hub credentials or at another team's Secret and
	// have the agent send it to a server of the bundle author's choosing.
	LabelHubSinks = "kollect.dev/hub-sinks"
	// HubSinksAllowed is LabelHubSinks' value that grants the read.
	HubSinksAllowed = "allow"

	// LabelSecretExtraction on a Namespace, set to SecretExtractionAllowed by the cluster admin,
	// lets profiles that read core v1 Secrets as they are (every profile on Secrets but those
	// with decode: HelmRelease) read the Secrets of that namespace. They read no other: the
	// agent's RBAC for Helm releases (the chart's rbac.helmReleases) cannot be narrowed to
	// release Secrets, and without this grant any tenant's profile on Secrets would export
	// every Secret the agent can read. Namespaces are cluster-scoped, so tenants cannot label
	// them.
	LabelSecretExtraction = "kollect.dev/secret-extraction"
	// SecretExtractionAllowed is LabelSecretExtraction's value that grants the read.
	SecretExtractionAllowed = "allow"
)
