package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"kollect.dev/agent/internal/export"
)

// Purger is implemented by the sinks many clusters share (the databases, the object stores
// s3 and gcs, the event sinks kafka and nats): it tells what the sink holds of one cluster and
// removes it. A retired cluster's rows would otherwise stay in the shared store forever,
// looking current; `kollect sinks purge` calls it, and the agent's delivery worker calls it
// for the inventory's own state once a deletionPolicy Delete's empty snapshot was accepted.
//
// inventory "" means every inventory of the cluster. Both methods touch nothing of any other
// cluster, and a sink built for an agent (its Env names a cluster) purges only that one.
type Purger interface {
	// Holdings reports, per inventory, what the sink holds of the cluster, sorted by
	// inventory; none when it holds nothing. It only reads.
	Holdings(ctx context.Context, cluster, inventory string) ([]Holding, error)
	// Purge removes every row, coverage entry and state record of the cluster (of one
	// inventory when inventory is not "") and returns what it removed, sorted by inventory.
	// When cutoff is not zero it is the safety check too: if a state record was written at
	// or after cutoff (see Holding.LastSeen) Purge removes nothing of that inventory and
	// returns an error wrapping ErrNotRetired. Each backend documents what is atomic.
	Purge(ctx context.Context, cluster, inventory string, cutoff time.Time) ([]Holding, error)
}

// ErrNotRetired is returned (wrapped) by Purge when the cluster's agent wrote a state record
// after the cutoff: it is probably alive and would write the rows again.
var ErrNotRetired = errors.New("the cluster's agent wrote to the sink after the cutoff")

// Holding is what a sink holds of one (cluster, inventory).
type Holding struct {
	Inventory string `json:"inventory"`
	// Rows, CoverageEntries and StateRecords count the inventory's rows, its per-target
	// coverage entries and its state records (one, except in a sink without unique keys
	// that someone wrote to by hand, or none after an interrupted export or purge). An object
	// store counts the rows and coverage its manifest (the state record) lists; an event sink
	// the rows whose latest record is not a delete, and the coverage its state record carries.
	Rows            int `json:"rows"`
	CoverageEntries int `json:"coverageEntries"`
	StateRecords    int `json:"stateRecords"`
	// Objects counts what a snapshot or event sink stores for the inventory besides its state
	// record, which a purge removes: documents in an object store (s3, gcs), messages in a
	// stream and entries in its key-value bucket (nats), keys still holding a value in a
	// topic (kafka: rows and snapshot chunks, each gets a tombstone), the row versions of a
	// postgres sink's history table (history: true). Other databases leave it 0.
	Objects int `json:"objects,omitempty"`
	// ChangedAt is the state's last change (exported_at), ConfirmedAt its last confirmation
	// (confirmed_at); zero when the state has none.
	ChangedAt   time.Time `json:"changedAt,omitzero"`
	ConfirmedAt time.Time `json:"confirmedAt,omitzero"`
	// Writer is the agent that last exported or confirmed, as the state names it.
	Writer export.Writer `json:"writer,omitzero"`
}

// LastSeen is when the cluster's agent last wrote the state: the later of its confirmation
// and its change. The change counts too because an export whose coverage is incomplete (a
// target forbidden) changes the state without confirming it, and that agent is alive. Zero
// means no state says anything about an agent.
func (h Holding) LastSeen() time.Time {
	if h.ChangedAt.After(h.ConfirmedAt) {
		return h.ChangedAt
	}
	return h.ConfirmedAt
}

// Retired reports whether the holding's agent last wrote the state before cutoff. A holding
// without any state time (rows left by an interrupted export or purge) is retired: nothing
// says an agent is alive.
func (h Holding) Retired(cutoff time.Time) bool {
	return h.LastSeen().Before(cutoff)
}

// NotRetired returns the holdings that are not retired at cutoff; none when cutoff is zero
// (no safety check).
func NotRetired(hs []Holding, cutoff time.Time) []Holding {
	if cutoff.IsZero() {
		return nil
	}
	var out []Holding
	for _, h := range hs {
		if !h.Retired(cutoff) {
			out = append(out, h)
		}
	}
	return out
}

// NotRetiredError is the error of a purge its cutoff refused: it names the cluster, and each
// inventory with when its agent last wrote the state.
func NotRetiredError(cluster string, late []Holding, cutoff time.Time) error {
	parts := make([]string, len(late))
	for i, h := range late {
		parts[i] = fmt.Sprintf("inventory %s at %s", h.Inventory, h.LastSeen().UTC().Format(time.RFC3339))
	}
	return fmt.Errorf("cluster %s: %w %s: %s", cluster, ErrNotRetired, cutoff.UTC().Format(time.RFC3339), strings.Join(parts, ", "))
}

// HoldingSet gathers holdings by inventory as a backend reads its tables one by one.
type HoldingSet map[string]*Holding

// Of returns the inventory's holding, adding an empty one.
func (s HoldingSet) Of(inventory string) *Holding {
	h := s[inventory]
	if h == nil {
		h = &Holding{Inventory: inventory}
		s[inventory] = h
	}
	return h
}

// List returns the holdings sorted by inventory.
func (s HoldingSet) List() []Holding {
	out := make([]Holding, 0, len(s))
	for _, h := range s {
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b Holding) int { return strings.Compare(a.Inventory, b.Inventory) })
	return out
}

// OwnCluster refuses a purge of no cluster, and one of another cluster than the agent's own
// by a sink the agent built (own is its Env's cluster): an agent only ever deletes its own
// cluster's data. Operator handles name no cluster (own "") and may purge any. kind and dest
// name the sink in the error.
func OwnCluster(kind, dest, own, cluster string) error {
	switch {
	case cluster == "":
		return Terminalf("%s sink %s: purge of no cluster", kind, dest)
	case own != "" && cluster != own:
		return Terminalf("%s sink %s: the sink of cluster %s may not purge cluster %s", kind, dest, own, cluster)
	}
	return nil
}
