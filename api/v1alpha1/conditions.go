package v1alpha1

// Condition types and reasons are API: alerts, `kubectl wait`, the hub's rollout gates and its
// fleet health key on them, so a reason never changes its meaning and a message is only ever
// for people. Code that reads conditions compares types and reasons, never message text.

// Condition types shared by every Kollect kind.
const (
	// ConditionReady is True when the object is fully in effect: compiled, watching, exporting.
	ConditionReady = "Ready"
	// ConditionDegraded is True when the object works only in part (a scope rule, a forbidden
	// kind, a failing sink) and the message says which part: something needs a person. What
	// clears by itself or was asked for (a watch listing, an export on its way, suspend,
	// deletion) is not a degradation.
	ConditionDegraded = "Degraded"
	// ConditionSynced is True when every sink the inventory names holds its current snapshot,
	// and that snapshot is complete (Ready=True) and current (no watch behind). An inventory's
	// three conditions never contradict each other: docs/operations.md ("Conditions") gives
	// their values for each state.
	ConditionSynced = "Synced"
)

// Condition types of KollectTarget and KollectClusterTarget beside the shared ones.
const (
	// ConditionSecretsConfined is True, with reason ReasonSecretExtractionOptIn, on a target
	// whose profile reads core v1 Secrets without decoding them: it reads only the Secrets of
	// namespaces labelled LabelSecretExtraction=SecretExtractionAllowed. It is a note on what
	// the target may read, not a problem: it never takes the target out of Ready. Absent on
	// every other target.
	ConditionSecretsConfined = "SecretsConfined"
)

// Reasons of KollectProfile conditions.
const (
	// ReasonCompiled (Ready=True): every attribute compiled.
	ReasonCompiled = "Compiled"
	// ReasonCompileFailed (Ready=False): an expression does not compile; the message names it.
	ReasonCompileFailed = "CompileFailed"
)

// Reasons of KollectTarget and KollectClusterTarget conditions.
const (
	// ReasonWatching (Ready=True): the kind's watch is synced.
	ReasonWatching = "Watching"
	// ReasonSyncing (Ready=False): the watch is listing; clears by itself.
	ReasonSyncing = "Syncing"
	// ReasonProfileNotFound (Ready=False): the referenced profile does not exist.
	ReasonProfileNotFound = "ProfileNotFound"
	// ReasonProfileNotReady (Ready=False): the referenced profile does not compile.
	ReasonProfileNotReady = "ProfileNotReady"
	// ReasonKindNotFound (Ready=False): the API server does not serve the kind.
	ReasonKindNotFound = "KindNotFound"
	// ReasonInvalidSelection (Ready=False): a selector or match expression is invalid.
	ReasonInvalidSelection = "InvalidSelection"
	// ReasonForbidden (Ready=False on targets, Degraded=True on inventories): the agent may not
	// list or watch the kind.
	ReasonForbidden = "Forbidden"
	// ReasonWatchFailed (Ready=False): the watch failed for another reason.
	ReasonWatchFailed = "WatchFailed"
	// ReasonExtractionFailed (Degraded=True, on the target and its inventories): some objects
	// lack a required attribute or have a value of the wrong type.
	ReasonExtractionFailed = "ExtractionFailed"
	// ReasonMatchFailed (Degraded=True, on the target and its inventories): the match
	// expression fails on some objects (a field they lack, a result that is not a boolean);
	// they are not collected, and the message names some with the error.
	ReasonMatchFailed = "MatchFailed"
	// ReasonObjectsTruncated (Degraded=True, on the target and its inventories): some objects
	// a fullObject profile exports are larger than its maxBytes and were exported cut; the
	// message names some with the paths removed, and each such row lists them in
	// <attribute>Truncated.
	ReasonObjectsTruncated = "ObjectsTruncated"
	// ReasonBudgetExceeded (Ready=False on a profile and its targets, Degraded=True on their
	// inventories): the profile spent more CEL cost than its budget allows and is quarantined
	// on this agent: no longer evaluated, its targets' last rows kept. The message names the
	// profile and the budget; a new generation of the profile lifts it.
	ReasonBudgetExceeded = "BudgetExceeded"
	// ReasonSecretExtractionOptIn (SecretsConfined=True): the target's profile reads Secrets
	// as they are, so only those of namespaces the cluster admin labelled
	// kollect.dev/secret-extraction=allow are read; Secrets elsewhere give no rows.
	ReasonSecretExtractionOptIn = "SecretExtractionOptIn"
)

// Reasons of KollectInventory and KollectClusterInventory conditions.
const (
	// ReasonSnapshotReady (Ready=True): a complete snapshot exists.
	ReasonSnapshotReady = "SnapshotReady"
	// ReasonSnapshotPending (Ready=False): the first snapshot has not been built yet; clears
	// by itself.
	ReasonSnapshotPending = "SnapshotPending"
	// ReasonTargetsSyncing (Ready=False, Synced=False): a target's watch has not synced yet,
	// or the agent has not taken the target up yet, and nothing is wrong with any target;
	// clears by itself.
	ReasonTargetsSyncing = "TargetsSyncing"
	// ReasonTargetsIncomplete (Ready=False, Synced=False, Degraded=True): a target cannot be
	// collected (an error, a kind forbidden or not served, a target not found); its previous
	// rows are kept, and the messages name it. Synced=False carries it for a missing target
	// too, whose Ready reason is TargetNotFound, and for a forbidden or quarantined one, whose
	// Degraded reason is Forbidden or BudgetExceeded; Degraded=True carries it for any other
	// target that cannot be collected (a kind not served, a profile missing).
	ReasonTargetsIncomplete = "TargetsIncomplete"
	// ReasonTargetNotFound (Ready=False, Degraded=True): a named target does not exist.
	ReasonTargetNotFound = "TargetNotFound"
	// ReasonWatchBehind (Synced=False): a target's watch is behind: the agent projects its
	// events more slowly than they arrive, so the sinks hold what was projected so far, and
	// the message names the target. It clears when the watch catches up; if it persists, the
	// profiles of the kind cost more CPU than the agent has.
	ReasonWatchBehind = "WatchBehind"
	// ReasonNoProblems (Degraded=False): nothing is degraded.
	ReasonNoProblems = "AsExpected"
	// ReasonSinkNotFound: a referenced sink does not exist. Not set by the agent, which says
	// SinkInvalid.
	ReasonSinkNotFound = "SinkNotFound"
	// ReasonSinkInvalid (Degraded=True, Synced=False): a sink is missing or cannot be
	// configured, so it cannot hold the current snapshot.
	ReasonSinkInvalid = "SinkInvalid"
	// ReasonExported (Synced=True): every sink holds the current snapshot.
	ReasonExported = "Exported"
	// ReasonExportPending (Synced=False): an export is on its way; clears by itself.
	ReasonExportPending = "ExportPending"
	// ReasonExportFailed (Degraded=True, Synced=False): a sink failed; status.sinks says why.
	ReasonExportFailed = "ExportFailed"
	// ReasonSuspended (Synced=False): exports are suspended.
	ReasonSuspended = "Suspended"
	// ReasonRetiring (Ready=False, Synced=False): the inventory is deleted and the agent is
	// applying its deletionPolicy in every sink; the message names the sinks not done yet.
	ReasonRetiring = "Retiring"
	// ReasonRetireTimedOut (a Warning event): the deletionTimeout passed before every sink took
	// the inventory's last write; the event names the sinks whose data stayed as it was.
	ReasonRetireTimedOut = "RetireTimedOut"
	// ReasonWriterConflict (Degraded=True; Synced=False on the refused agent): another agent
	// writes the same cluster and inventory to a shared sink: two agents run with the same
	// --cluster-name. The agent that held the sink first keeps writing (its sink holds its
	// snapshot, so its Synced stays True); the other's exports are refused and write no row.
	// Both report it, and the message names the sink and the other agent's instance and
	// version. It clears once the other has not written for the conflict window (two confirm
	// intervals, 10 minutes without confirmations).
	ReasonWriterConflict = "WriterConflict"
)

// Reasons of sink conditions (KollectSnapshotSink, KollectDatabaseSink, KollectEventSink).
const (
	// ReasonProbeSucceeded (Ready=True): the connection test passed.
	ReasonProbeSucceeded = "ProbeSucceeded"
	// ReasonProbeFailed (Ready=False): the connection test failed; the message says why.
	ReasonProbeFailed = "ProbeFailed"
	// ReasonUnsupportedType (Ready=False): this agent has no backend for the sink's type.
	ReasonUnsupportedType = "UnsupportedType"
)

// Reasons of scope decisions: the Degraded (or Ready) reason of an object a KollectScope or
// KollectClusterScope refuses, the Synced=False reason of an inventory one of whose sinks is
// refused (it holds no current snapshot), and the Ready reason of a scope itself. Every
// reason of a scope decision starts with ReasonScopePrefix.
const (
	// ReasonScopePrefix begins every reason that comes from a scope decision.
	ReasonScopePrefix = "Scope"
	// ReasonScopeKindDenied: the scope does not allow the target's kind.
	ReasonScopeKindDenied = "ScopeKindDenied"
	// ReasonScopeNamespaceDenied: the scope does not allow a selected namespace.
	ReasonScopeNamespaceDenied = "ScopeNamespaceDenied"
	// ReasonScopeSinkDenied: the scope does not allow the sink.
	ReasonScopeSinkDenied = "ScopeSinkDenied"
	// ReasonScopeCadenceTooFast: the inventory exports more often than the scope allows; the
	// scope's minimum applies.
	ReasonScopeCadenceTooFast = "ScopeCadenceTooFast"
	// ReasonScopeProfileDenied: a KollectClusterTarget names a profile in a namespace a
	// KollectScope governs (a tenant's).
	ReasonScopeProfileDenied = "ScopeProfileDenied"
	// ReasonScopeMissing: tenant mode, and no scope governs the object.
	ReasonScopeMissing = "ScopeMissing"
	// ReasonScopeCredentialsDenied: the sink would authenticate as the agent itself (no
	// secretRef) or skip certificate verification, and no KollectClusterScope allows it.
	ReasonScopeCredentialsDenied = "ScopeCredentialsDenied"
	// ReasonHubSecretDenied: a sink the hub delivered names a Secret the cluster admin did not
	// label for hub-delivered sinks (LabelHubSinks); the agent does not use it.
	ReasonHubSecretDenied = "HubSecretDenied"
	// ReasonInForce (Ready=True on a scope): the agent enforces the scope.
	ReasonInForce = "InForce"
)

// TransientReasons are the Ready=False and Synced=False reasons that clear by themselves: an
// object still starting (a watch listing, a first snapshot, an export on its way). A reader
// that waits for health, such as the hub's rollout gates, waits through these and treats any
// other False reason as a failure. An inventory whose Ready or Synced is False for one of
// them alone is not Degraded.
var TransientReasons = []string{ReasonSyncing, ReasonSnapshotPending, ReasonTargetsSyncing, ReasonExportPending}

// Values of the errorClass of an inventory's sink export status.
const (
	SinkErrorTransient   = "transient"
	SinkErrorTerminal    = "terminal"
	SinkErrorCircuitOpen = "circuitOpen"
)

// Annotations a user sets to ask the agent for something now rather than on its schedule. Any
// new value (a timestamp, say) asks again.
const (
	// AnnotationProbeNow on a sink object runs its connection test and preview at once: after
	// fixing a Secret, say, instead of waiting for the next recheck (10 minutes, or one minute
	// while failing).
	AnnotationProbeNow = "kollect.dev/probe-now"
	// AnnotationResyncNow on an inventory resyncs every sink at once: a sink waiting to retry
	// (ten minutes after a terminal error, or a long backoff) tries again now, and every sink
	// is asked to make sure it holds the current snapshot. The value acted on is recorded in
	// status.resyncRequest.
	AnnotationResyncNow = "kollect.dev/resync-now"
)
