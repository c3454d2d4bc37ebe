package v1alpha1

// KindInfo names one Kollect kind and how the API server serves it.
//
// +kubebuilder:object:generate=false
type KindInfo struct {
	// Kind is the object kind, e.g. "KollectProfile".
	Kind string
	// Resource is the plural resource name the CRD declares, e.g. "kollectprofiles".
	Resource string
	// Namespaced is false for cluster-scoped kinds.
	Namespaced bool
	// Guardrail kinds (the scopes) say what teams and sinks may do; they are the cluster
	// admin's. The agent accepts them from a hub bundle only where its owner allowed it.
	Guardrail bool
}

// Kinds lists every Kollect kind (List kinds aside), in the order the documentation presents
// them: what to extract, what to watch, how to export, where rows go, what a team may do.
//
// It is the one list that code which must know "every Kollect kind" reads — the agent's hub
// allowlist, its webhook registration, the CR reference generator — so that adding a kind is
// one entry here (a test checks it against the types registered in the scheme and the CRDs).
// Do not modify it at run time.
var Kinds = []KindInfo{
	{Kind: "KollectProfile", Resource: "kollectprofiles", Namespaced: true},
	{Kind: "KollectTarget", Resource: "kollecttargets", Namespaced: true},
	{Kind: "KollectClusterTarget", Resource: "kollectclustertargets"},
	{Kind: "KollectInventory", Resource: "kollectinventories", Namespaced: true},
	{Kind: "KollectClusterInventory", Resource: "kollectclusterinventories"},
	{Kind: "KollectSnapshotSink", Resource: "kollectsnapshotsinks", Namespaced: true},
	{Kind: "KollectDatabaseSink", Resource: "kollectdatabasesinks", Namespaced: true},
	{Kind: "KollectEventSink", Resource: "kollecteventsinks", Namespaced: true},
	{Kind: "KollectScope", Resource: "kollectscopes", Namespaced: true, Guardrail: true},
	{Kind: "KollectClusterScope", Resource: "kollectclusterscopes", Guardrail: true},
}

// LookupKind returns the entry of Kinds for kind; ok is false when kind is not a Kollect kind.
func LookupKind(kind string) (info KindInfo, ok bool) {
	for _, k := range Kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return KindInfo{}, false
}
