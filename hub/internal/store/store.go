package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors callers branch on; implementations wrap them.
var (
	// ErrNotFound: no such cluster, token, bundle or revision.
	ErrNotFound = errors.New("not found")
	// ErrTokenInvalid: the bootstrap token is unknown, expired, revoked or used up.
	ErrTokenInvalid = errors.New("bootstrap token invalid, expired, revoked or used up")
	// ErrTokenBinding: the bootstrap token is bound to another cluster name or other labels.
	ErrTokenBinding = errors.New("the bootstrap token is bound to another cluster")
	// ErrClusterExists: the cluster name is held by a live agent and replacement was not allowed.
	ErrClusterExists = errors.New("cluster name already registered")
	// ErrClusterRevoked: the cluster name was revoked and no admin has released it yet.
	ErrClusterRevoked = errors.New("cluster name revoked and not released")
	// ErrConflict: a uniqueness rule was broken (for example an API token name in use, or a
	// second active rollout of a bundle).
	ErrConflict = errors.New("conflict")
	// ErrStale: a compare-and-swap lost: the rollout changed since it was read (another hub
	// replica, or a user action, moved it first). Re-read and decide again.
	ErrStale = errors.New("changed concurrently")
	// ErrCredentialChanged: a heartbeat checked against Heartbeat.Credential found the
	// cluster's credential changed, revoked or deleted, and wrote nothing. Authenticate the
	// caller again.
	ErrCredentialChanged = errors.New("the cluster's credential changed since it was checked")
)

// ActiveRolloutError says a bundle has an active rollout that forbids the change. It matches
// ErrConflict with errors.Is.
type ActiveRolloutError struct {
	Bundle    string
	RolloutID int64
}

func (e *ActiveRolloutError) Error() string {
	return fmt.Sprintf("bundle %s has active rollout %d: wait for it to complete, or abort it", e.Bundle, e.RolloutID)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ActiveRolloutError) Is(target error) bool { return target == ErrConflict }

// Matcher reports whether a bundle's cluster selector (as stored, JSON) selects a cluster with
// these labels. The store calls it inside its transactions so that a cluster registering while
// a revision is created is never missed by both.
type Matcher func(selectorJSON string, labels map[string]string) (bool, error)

// ConfigWatcher is implemented by a store that several replicas share and that can push a
// change of desired configuration (a move of the config epoch) to the others, instead of
// leaving them to find it at their next poll. WatchConfig calls changed after every such
// change committed by any replica (and after it may have missed some), reports the errors
// that interrupt it to onError, and returns when ctx ends.
type ConfigWatcher interface {
	WatchConfig(ctx context.Context, changed func(), onError func(error))
}

// Leaser is implemented by a store that several replicas share: one replica at a time holds a
// named lease (the rollout engine's), and when it dies another takes it. HoldLease keeps
// trying to take the lease and holds it until ctx ends, calling held(true) when this replica
// took it and held(false) when it lost it, and reports the errors that interrupt it to
// onError. A store of one process holds it at once.
type Leaser interface {
	HoldLease(ctx context.Context, name string, held func(bool), onError func(error))
}

// Store is the hub's persistence. Implementations are safe for concurrent use, and several hub
// replicas may share one database (PostgreSQL).
type Store interface {
	// Close releases the database.
	Close() error

	PreviewStore

	CreateBootstrapToken(ctx context.Context, t BootstrapToken) error
	ListBootstrapTokens(ctx context.Context) ([]BootstrapToken, error)
	RevokeBootstrapToken(ctx context.Context, id string) error
	// BootstrapTokenUsable reports, reading only, whether a bootstrap token with this hash
	// could register a cluster now (ErrTokenInvalid if not). Register asks it before taking
	// any lock or writing anything, so that a flood of bad tokens cannot stall the store.
	BootstrapTokenUsable(ctx context.Context, hash string, now time.Time) error
	// RegistrationRetryable reports, reading only, whether a registration of this cluster
	// with this (unrevoked) bootstrap token and registration key (keyHash, never "") would
	// complete an earlier one: the cluster registered with both at or after since and its
	// credential was never used (no heartbeat).
	RegistrationRetryable(ctx context.Context, cluster, hash, keyHash string, since time.Time) (bool, error)

	CreateAPIToken(ctx context.Context, t APIToken) error
	ListAPITokens(ctx context.Context) ([]APIToken, error)
	RevokeAPIToken(ctx context.Context, id string) error
	// APITokenByHash returns a live (unrevoked) token, else ErrNotFound; the caller compares
	// ExpiresAt with its clock.
	APITokenByHash(ctx context.Context, hash string) (APIToken, error)

	// RegisterCluster consumes one use of the bootstrap token and creates the cluster, or
	// replaces an existing one (new credential, new labels) when it was revoked and released,
	// or when p.Replace is set and the token allows it. A revoked name that was not released
	// is refused with ErrClusterRevoked, whatever the token; a released name whose rejected
	// registration used the same token, with ErrRegistrationRejected. The cluster is
	// ApprovalPending when p.RequireApproval is set or the token requires approval, else
	// ApprovalApproved; p.Peer, the token's identity and p.AgentVersion are kept as its
	// Registration. A registration that
	// RegistrationRetryable(p.Name, p.TokenHash, p.KeyHash, p.RetrySince) allows completes the earlier
	// one instead: new credential and labels, no use consumed, Retried set on the result. It sets the cluster's desired revisions to the stable revision of every bundle whose
	// stable revision's selector matches (the target revision instead for a cluster an active
	// rollout has already moved).
	RegisterCluster(ctx context.Context, p RegisterParams, match Matcher) (Cluster, error)
	// ClusterByCredential returns the cluster holding this credential hash, revoked or not, as
	// its current credential or as the previous one of a rotation (whatever their expiry:
	// the caller compares CredentialExpiresAt or PreviousExpiresAt with its clock).
	ClusterByCredential(ctx context.Context, hash string) (Cluster, error)
	// ClusterCredentials returns every cluster, revoked or not, with only its name,
	// revocation and credential fields set: what a cache of credentials refreshes in one read.
	ClusterCredentials(ctx context.Context) ([]Cluster, error)
	// RotateCredential gives a cluster the new credential r.NewHash if r.PresentedHash is
	// its current or previous credential (ErrNotFound otherwise, or when the cluster is
	// revoked). Presented as the current one, it becomes the previous, valid until
	// r.PreviousUntil; presented as the previous one, that stays the previous with its
	// deadline and the current one is dropped — only while no heartbeat has presented the
	// current one (its agent never stored it; ErrNotFound after).
	RotateCredential(ctx context.Context, r Rotation) (Cluster, error)
	GetCluster(ctx context.Context, name string) (Cluster, error)
	// LiveClusters lists the names of the clusters that receive configuration — unrevoked and
	// approved —, sorted (cheap: no status).
	LiveClusters(ctx context.Context) ([]string, error)
	ListClusters(ctx context.Context) ([]Cluster, error)
	// ObserveFleet lists every cluster (revoked too, but none pending approval) with its labels
	// and its desired revision of bundle, without status: what the rollout engine needs of the
	// whole fleet to find clusters that joined or left.
	ObserveFleet(ctx context.Context, bundle string) ([]Observed, error)
	// ObserveClusters is ObserveFleet for the named clusters only (those that exist and are not
	// pending approval), without labels: what the rollout engine reads of the clusters it is
	// judging.
	ObserveClusters(ctx context.Context, bundle string, names []string) ([]Observed, error)
	// ClusterStatuses returns the stored status (AgentStatus as protobuf JSON) of each named
	// cluster that has one.
	ClusterStatuses(ctx context.Context, names []string) (map[string]string, error)
	// RevokeCluster revokes a cluster's agent; its name stays blocked until ReleaseCluster.
	RevokeCluster(ctx context.Context, name string) error
	// ReleaseCluster lets a revoked cluster's name be registered again (ErrNotFound for an
	// unknown cluster, ErrConflict for one that is not revoked).
	ReleaseCluster(ctx context.Context, name string) error
	// ApproveCluster approves a cluster pending approval (ErrNotFound for an unknown cluster,
	// ErrConflict for one that is not pending or is revoked), recording d, and selects its
	// bundles afresh as a registration does: the revisions chosen while it was pending may
	// have been overtaken by a rollout it took no part in.
	ApproveCluster(ctx context.Context, d Decision, match Matcher) (Cluster, error)
	// RejectCluster marks a cluster's registration rejected, recording d, and revokes it as
	// RevokeCluster does (ErrNotFound for an unknown cluster, ErrConflict for one already
	// revoked). It returns the cluster as it was before.
	RejectCluster(ctx context.Context, d Decision) (Cluster, error)
	// SetClusterLabels replaces a cluster's labels and re-selects its bundles. Per bundle: a
	// cluster an active rollout has moved keeps the target revision while its selector
	// matches; otherwise a cluster keeps the revision it holds while that revision's selector
	// matches; otherwise it gets the stable revision when its selector matches, else nothing.
	SetClusterLabels(ctx context.Context, name string, labels map[string]string, match Matcher) error
	// DeleteCluster removes a cluster and its desired revisions.
	DeleteCluster(ctx context.Context, name string) error
	// RecordHeartbeat stores an agent's status and its applied revisions, and adds h.Record to
	// the cluster's heartbeat history unless the newest record has the same values and is
	// younger than HistoryInterval; the history keeps the newest HistoryLimit records.
	RecordHeartbeat(ctx context.Context, h Heartbeat) error
	// Heartbeats lists a cluster's heartbeat history, newest first, at most limit records
	// (ErrNotFound for an unknown cluster).
	Heartbeats(ctx context.Context, cluster string, limit int) ([]HeartbeatRecord, error)

	// CreateRevision stores rev as the bundle's next revision (creating the bundle) unless
	// its digest equals the latest revision's, in which case it returns the latest with
	// created=false. Without hold the revision becomes the bundle's stable revision, every
	// cluster the selector matches gets it as its desired revision, and clusters it no longer
	// matches lose the bundle; that is refused with an *ActiveRolloutError while the bundle has
	// an active rollout. With hold only the revision is stored. selected names the clusters
	// the selector matches either way.
	CreateRevision(ctx context.Context, rev Revision, description string, hold bool, match Matcher) (out Revision, created bool, selected []string, err error)
	// DeleteBundle marks the bundle deleted, takes it from every cluster and aborts its
	// active rollout.
	DeleteBundle(ctx context.Context, name string) error
	ListBundles(ctx context.Context) ([]Bundle, error)
	GetBundle(ctx context.Context, name string) (Bundle, error)
	// GetRevision returns one revision; revision 0 is the latest.
	GetRevision(ctx context.Context, bundle string, revision int64) (Revision, error)
	// ListRevisions lists revisions newest first, without manifests.
	ListRevisions(ctx context.Context, bundle string) ([]Revision, error)

	// SetDesiredRevision moves the named clusters to a revision of a bundle (the rollout
	// primitive).
	SetDesiredRevision(ctx context.Context, bundle string, revision int64, clusters []string) error
	// Desired lists desired revisions: of one cluster, or of all when cluster is "". A cluster
	// pending approval has none.
	Desired(ctx context.Context, cluster string) ([]Desired, error)
	// ConfigEpoch increases with every change of desired configuration; hub replicas poll it.
	ConfigEpoch(ctx context.Context) (int64, error)
	// ClusterEpoch increases with every change of a cluster's registration — registration,
	// labels, revocation, release, deletion, credential rotation — through any replica, and
	// never with a heartbeat. A value read after such a change committed is never the one
	// read before it: caches of credentials and of the fleet's membership compare it.
	ClusterEpoch(ctx context.Context) (int64, error)

	// CreateRollout stores a new rollout (ID, Version, timestamps assigned) with its clusters.
	// A bundle has at most one active rollout: a second one fails with an
	// *ActiveRolloutError. supersede, when not nil, is an existing rollout's new state,
	// written in the same transaction with a compare-and-swap on its Version (ErrStale) —
	// how a rollback ends the rollout it replaces.
	CreateRollout(ctx context.Context, r Rollout, clusters []RolloutCluster, supersede *Rollout) (Rollout, error)
	GetRollout(ctx context.Context, id int64) (Rollout, error)
	// RolloutClusters lists a rollout's clusters sorted by name.
	RolloutClusters(ctx context.Context, id int64) ([]RolloutCluster, error)
	// ListRollouts lists rollouts newest first.
	ListRollouts(ctx context.Context, f RolloutFilter) ([]Rollout, error)
	// ApplyRolloutStep writes one step of a rollout atomically; see RolloutStep. It fails with
	// ErrStale when step.Rollout.Version is not the stored version, and returns the stored
	// rollout (Version increased) otherwise.
	ApplyRolloutStep(ctx context.Context, step RolloutStep, match Matcher) (Rollout, error)

	AppendAudit(ctx context.Context, e AuditEvent) error
	// ListAudit lists events newest first, older than beforeID when it is not 0.
	ListAudit(ctx context.Context, beforeID int64, limit int) ([]AuditEvent, error)
}

// Role is an API token's role; larger is more powerful.
type Role int

// Roles, ordered.
const (
	RoleViewer   Role = 1
	RoleOperator Role = 2
	RoleAdmin    Role = 3
)

// BootstrapToken lets agents register; only its hash is stored.
type BootstrapToken struct {
	ID           string
	Hash         string
	Description  string
	ExpiresAt    time.Time
	MaxUses      int64 // 0: unlimited
	Uses         int64
	Revoked      bool
	AllowReplace bool
	CreatedBy    string
	CreatedAt    time.Time
	// ClusterName, when set, is the only cluster name the token registers; Labels, when set,
	// are exactly the labels such a cluster may ask for (RegisterCluster: ErrTokenBinding).
	ClusterName string
	Labels      map[string]string
	// RequireApproval: clusters registered with the token are ApprovalPending.
	RequireApproval bool
}

// APIToken authenticates FleetService callers; only its hash is stored.
type APIToken struct {
	ID        string
	Name      string
	Hash      string
	Role      Role
	Revoked   bool
	CreatedBy string
	CreatedAt time.Time
	// ExpiresAt is when the token stops working (zero: never).
	ExpiresAt time.Time
}

// Cluster is a registered agent's cluster.
type Cluster struct {
	Name           string
	Labels         map[string]string
	CredentialHash string
	Revoked        bool
	// Released: an admin released the revoked name; the next registration may take it.
	Released bool
	// BootstrapHash is the hash of the bootstrap token the cluster registered with.
	BootstrapHash string
	// CredentialExpiresAt is when CredentialHash stops working (zero: never).
	CredentialExpiresAt time.Time
	// PreviousCredentialHash is the credential a rotation replaced, valid until
	// PreviousExpiresAt so that the agent can store the new one first.
	PreviousCredentialHash string
	PreviousExpiresAt      time.Time
	// Retried is set on RegisterCluster's result when it completed an earlier registration
	// (it is not stored).
	Retried           bool
	AgentVersion      string
	KubernetesVersion string
	RegisteredAt      time.Time
	LastHeartbeat     time.Time // zero until the first heartbeat
	AppliedDigest     string
	// Status is the last heartbeat's AgentStatus as protobuf JSON.
	Status string
	// Approval is ApprovalApproved, ApprovalPending or ApprovalRejected.
	Approval     Approval
	Registration Registration
	// DecidedBy and DecidedAt record the approval or rejection (empty and zero when the
	// registration needed none).
	DecidedBy string
	DecidedAt time.Time
}

// Observed is a cluster as the rollout engine sees it on each pass: no status, and the desired
// revision of the one bundle asked about.
type Observed struct {
	Name          string
	Labels        map[string]string // nil from ObserveClusters
	Revoked       bool
	LastHeartbeat time.Time
	// Desired is the cluster's desired revision of the bundle; 0 when it does not hold it.
	Desired int64
}

// Rotation is one credential rotation.
type Rotation struct {
	Cluster       string
	PresentedHash string
	NewHash       string
	NewExpiresAt  time.Time
	PreviousUntil time.Time
}

// RegisterParams describes one registration.
type RegisterParams struct {
	TokenHash      string
	Name           string
	Labels         map[string]string
	CredentialHash string
	Replace        bool // the request asks to replace; honoured only if the token allows it
	// CredentialExpiresAt is when the new credential expires (zero: never).
	CredentialExpiresAt time.Time
	// KeyHash is the hash of the registration key the agent sent ("" for none).
	KeyHash string
	// RetrySince, when not zero, lets this registration complete an earlier one of the same
	// cluster with the same token and the same (non-empty) key made at or after it whose
	// credential was never used.
	RetrySince        time.Time
	AgentVersion      string
	KubernetesVersion string
	Now               time.Time
	// Peer is the address the registration came from.
	Peer string
	// RequireApproval makes the cluster ApprovalPending whatever the token says (the hub's
	// --require-approval).
	RequireApproval bool
}

// Heartbeat is one ReportStatus.
type Heartbeat struct {
	Cluster           string
	At                time.Time
	AgentVersion      string
	KubernetesVersion string
	AppliedDigest     string
	Applied           map[string]int64 // bundle → applied revision
	Status            string
	// Record is the heartbeat's summary for the history; its At is the heartbeat's.
	Record HeartbeatRecord
	// StateAt, when set, gives Record.State from the time of the cluster's previous heartbeat
	// (zero: none), read in the heartbeat's own transaction: the caller's copy of the cluster
	// may be older than the last heartbeat (another replica's, or a cached one).
	StateAt func(previous time.Time) string
	// Credential, when set, is the cluster's credential as the caller authenticated the
	// heartbeat against (a cached copy): the heartbeat is written only if the cluster's row
	// still holds exactly it and is not revoked, in the same statement, else nothing is
	// written and RecordHeartbeat returns ErrCredentialChanged. A replica then need not read
	// the cluster epoch before each heartbeat to refuse a credential revoked elsewhere.
	Credential *CredentialFacts
	// Presented is the hash of the credential the heartbeat was authenticated with: when it
	// is the cluster's current one, the store records that the current credential is in use,
	// which ends the previous one's right to rotate (RotateCredential).
	Presented string
}

// CredentialFacts are the credential fields of a cluster's row: what decides whether a
// presented credential works (with the cluster's revocation).
type CredentialFacts struct {
	Hash              string
	ExpiresAt         time.Time
	PreviousHash      string
	PreviousExpiresAt time.Time
}

// CredentialFactsOf returns c's credential fields.
func CredentialFactsOf(c Cluster) CredentialFacts {
	return CredentialFacts{Hash: c.CredentialHash, ExpiresAt: c.CredentialExpiresAt,
		PreviousHash: c.PreviousCredentialHash, PreviousExpiresAt: c.PreviousExpiresAt}
}

// The heartbeat history keeps a record of every heartbeat that changed a recorded value other
// than the item count, of at most one heartbeat per HistoryInterval otherwise — so an item
// count that moves with every heartbeat is recorded once a minute —, and only the newest
// HistoryLimit records per cluster: a fleet of agents reporting the same status, or only
// growing inventories, writes nothing more than once a minute each.
const (
	HistoryInterval = time.Minute
	HistoryLimit    = 100
)

// HeartbeatRecord is one entry of a cluster's heartbeat history.
type HeartbeatRecord struct {
	At                  time.Time
	AgentVersion        string
	AppliedDigest       string
	Inventories         int64
	Items               int64
	InventoriesNotReady int64
	SinkErrors          int64
	// State is the cluster's state when the heartbeat arrived ("online", "pending", "stale",
	// "offline").
	State string
}

// SameValues reports whether two records differ in nothing but their time.
func (r HeartbeatRecord) SameValues(o HeartbeatRecord) bool {
	r.At = o.At
	return r == o
}

// SameBesidesItems reports whether two records differ in nothing but their time and item
// count: such a heartbeat waits for HistoryInterval like an unchanged one.
func (r HeartbeatRecord) SameBesidesItems(o HeartbeatRecord) bool {
	r.Items = o.Items
	return r.SameValues(o)
}

// Bundle is a named, versioned set of manifests.
type Bundle struct {
	Name           string
	Description    string
	LatestRevision int64
	Selector       string // JSON of the latest revision's selector
	// StableRevision is what newly selected clusters get: the latest revision created without
	// hold, or the target of the last completed rollout; 0 while nothing was released.
	StableRevision int64
	// ActiveRolloutID is the bundle's active rollout, 0 when none.
	ActiveRolloutID int64
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// Revision is one immutable version of a bundle.
type Revision struct {
	Bundle    string
	Revision  int64
	Manifests string
	Selector  string // JSON
	Digest    string
	Objects   string // JSON list of object refs
	CreatedBy string
	CreatedAt time.Time
	Message   string
}

// Desired is the revision of a bundle a cluster must hold, and what it reported applied.
type Desired struct {
	Cluster         string
	Bundle          string
	Revision        int64
	AppliedRevision int64
}

// AuditEvent is one recorded mutation.
type AuditEvent struct {
	ID     int64
	Time   time.Time
	Actor  string
	Action string
	Target string
	Detail string
}
