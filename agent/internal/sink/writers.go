package sink

import (
	"errors"
	"fmt"
	"time"

	"kollect.dev/agent/internal/export"
)

// One writer per (cluster, inventory) in a shared sink. Two agents started with the same
// --cluster-name would otherwise overwrite and delete each other's rows, each export undoing
// the other's. Every sink that keeps a state record (database, event and object sinks) checks,
// in the same transaction, lock or conditional write that reads its state, who wrote it last:
//
//   - The state names another instance that wrote (exported or confirmed) within the
//     conflict window: the call is refused. No row changes and the state keeps its
//     checksum and writer; the sink records only a contender mark (the refused writer and
//     when), and returns a *WriterConflictError.
//   - The state names another instance whose last write is older than the window: that agent
//     is gone (uninstalled, reinstalled in another namespace), and the call takes over.
//   - The state is ours and carries a contender mark of another instance younger than the
//     window: the call proceeds and, after it committed, returns a *ContendedError, which the
//     caller treats as success plus a report.
//
// A writer without an instance (tests, states from before writers were recorded) never
// conflicts.

// DefaultConflictWindow is the conflict window when the inventory does not confirm: an agent
// whose exports are this old is taken for gone.
const DefaultConflictWindow = 10 * time.Minute

// ConflictWindow is how long a writer holds a (cluster, inventory) after its last write: two
// confirm intervals, so that a live holder, which writes at least once an interval while its
// snapshot is complete, is never taken over; DefaultConflictWindow without confirmations.
func ConflictWindow(confirmInterval time.Duration) time.Duration {
	if confirmInterval <= 0 {
		return DefaultConflictWindow
	}
	return 2 * confirmInterval
}

// ErrWriterConflict is matched (errors.Is) by every *WriterConflictError.
var ErrWriterConflict = errors.New("another agent writes this cluster's inventory to the sink")

// ErrContended is matched (errors.Is) by every *ContendedError.
var ErrContended = errors.New("another agent tried to write this cluster's inventory to the sink")

// WriterConflictError refuses an Export or Confirm: the sink's state for the cluster and
// inventory is held by another agent that wrote within the window. Nothing but the contender
// mark was written. Retrying before the holder stops writing cannot succeed: the delivery
// worker retries at the next confirm interval.
type WriterConflictError struct {
	Cluster, Inventory string
	// Holder is the agent the state names; HolderLastWrite its last export or confirmation.
	Holder          export.Writer
	HolderLastWrite time.Time
	// Self is the refused agent.
	Self export.Writer
	// Window is the conflict window the refusal was decided with.
	Window time.Duration
}

func (e *WriterConflictError) Error() string {
	return fmt.Sprintf("writer conflict: %s/%s is written by agent %s (version %s, last write %s), not by this agent %s (version %s): "+
		"two agents run with --cluster-name %s; give each cluster its own name. "+
		"Nothing was written; this agent takes over once %s has not written for %s",
		e.Cluster, e.Inventory, e.Holder.Instance, orUnknown(e.Holder.Version), e.HolderLastWrite.UTC().Format(time.RFC3339),
		e.Self.Instance, orUnknown(e.Self.Version), e.Cluster, e.Holder.Instance, e.Window)
}

// Is makes errors.Is(err, ErrWriterConflict) hold.
func (e *WriterConflictError) Is(target error) bool { return target == ErrWriterConflict }

// ContendedError is returned by an Export or Confirm that succeeded (the sink holds the batch
// or the confirmation) on a state that another agent tried to write within the window: its
// contender mark. The caller treats it as success and reports the conflict.
type ContendedError struct {
	Cluster, Inventory string
	// Contender is the refused agent, At when it last tried.
	Contender export.Writer
	At        time.Time
	// Self is the holder, whose write succeeded.
	Self   export.Writer
	Window time.Duration
}

func (e *ContendedError) Error() string {
	return fmt.Sprintf("writer conflict: agent %s (version %s) also exports %s/%s here (last refused %s); this agent %s (version %s) keeps writing: "+
		"two agents run with --cluster-name %s; give each cluster its own name. "+
		"The other may take over once this agent has not written for %s",
		e.Contender.Instance, orUnknown(e.Contender.Version), e.Cluster, e.Inventory, e.At.UTC().Format(time.RFC3339),
		e.Self.Instance, orUnknown(e.Self.Version), e.Cluster, e.Window)
}

// Is makes errors.Is(err, ErrContended) hold.
func (e *ContendedError) Is(target error) bool { return target == ErrContended }

func orUnknown(v string) string {
	if v == "" {
		return "unknown"
	}
	return v
}

// WriterCheck is what a sink read from its state, in the transaction or under the lock that
// writes it, to decide who may write.
type WriterCheck struct {
	Cluster, Inventory string
	// Self is the agent writing now, Now its time (the batch's ExportedAt, the confirmation's
	// At), Window the batch's or confirmation's ConflictWindow (DefaultConflictWindow if 0).
	Self   export.Writer
	Now    time.Time
	Window time.Duration
	// Holder is the writer the state names, HolderLastWrite the later of its exported and
	// confirmed times.
	Holder          export.Writer
	HolderLastWrite time.Time
	// Contender is the state's contender mark, ContendedAt when it was set (zero: none).
	Contender   export.Writer
	ContendedAt time.Time
}

func (c *WriterCheck) window() time.Duration {
	if c.Window <= 0 {
		return DefaultConflictWindow
	}
	return c.Window
}

// Refusal is the *WriterConflictError the write must stop with, or nil when Self may write
// (the state is its own, names nobody, or its holder has not written for the window).
func (c *WriterCheck) Refusal() error {
	if c.Self.Instance == "" || c.Holder.Instance == "" || c.Holder.Instance == c.Self.Instance {
		return nil
	}
	if !c.HolderLastWrite.Add(c.window()).After(c.Now) {
		return nil // the holder is gone: take over
	}
	return &WriterConflictError{Cluster: c.Cluster, Inventory: c.Inventory, Holder: c.Holder, HolderLastWrite: c.HolderLastWrite,
		Self: c.Self, Window: c.window()}
}

// TakesOver reports whether Self writes over another instance's state (one whose holder has
// not written for the window): sinks log it, since it is also what a second agent does once the
// first stops.
func (c *WriterCheck) TakesOver() bool {
	return c.Self.Instance != "" && c.Holder.Instance != "" && c.Holder.Instance != c.Self.Instance && c.Refusal() == nil
}

// Contention is the *ContendedError a successful write of Self reports, or nil when the state
// carries no contender mark of another instance within the window.
func (c *WriterCheck) Contention() error {
	if c.Self.Instance == "" || c.Contender.Instance == "" || c.Contender.Instance == c.Self.Instance || c.ContendedAt.IsZero() {
		return nil
	}
	if !c.ContendedAt.Add(c.window()).After(c.Now) {
		return nil
	}
	return &ContendedError{Cluster: c.Cluster, Inventory: c.Inventory, Contender: c.Contender, At: c.ContendedAt, Self: c.Self, Window: c.window()}
}
