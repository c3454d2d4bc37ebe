package export

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"
)

// Snapshot is the canonical content of one inventory at one moment: rows sorted with Compare,
// unique by key, and their checksum. A Snapshot is immutable once built; the delivery workers
// share one between every sink that accepted it.
type Snapshot struct {
	Rows     []Row
	digests  [][sha256.Size]byte
	Checksum string
}

// NewSnapshot sorts rows canonically and computes the checksum. It takes ownership of rows.
func NewSnapshot(rows []Row) *Snapshot {
	slices.SortFunc(rows, func(a, b Row) int { return Compare(&a, &b) })
	s := &Snapshot{Rows: rows, digests: make([][sha256.Size]byte, len(rows))}
	var c canonicalEncoder
	for i := range rows {
		s.digests[i] = sha256.Sum256(c.encode(&rows[i]))
	}
	s.Checksum = checksum(s.digests)
	return s
}

// checksum is "sha256:" + hex(SHA-256(d1 ‖ d2 ‖ … ‖ dn)) where di is the SHA-256 of the i-th
// row's canonical JSON in canonical order. Hashing digests rather than the rows keeps a
// re-check cheap and lets a reader verify a snapshot row by row.
func checksum(digests [][sha256.Size]byte) string {
	h := sha256.New()
	for i := range digests {
		h.Write(digests[i][:])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Len is the number of rows.
func (s *Snapshot) Len() int {
	if s == nil {
		return 0
	}
	return len(s.Rows)
}

// ShortChecksum is the first 12 hex digits of the checksum, for messages.
func ShortChecksum(sum string) string {
	const prefix = len("sha256:")
	if len(sum) < prefix+12 {
		return sum
	}
	return sum[prefix : prefix+12]
}

// Writer names the agent that wrote a sink's state: provenance for the sink's readers, and
// what tells apart two agents that were given the same cluster name.
type Writer struct {
	// Version is the agent's version.
	Version string `json:"version"`
	// Instance identifies one installation of the agent, stable across restarts, upgrades and
	// leader changes: <its namespace>@<UID of the cluster's kube-system namespace>.
	Instance string `json:"instance"`
}

// Envelope wraps a snapshot for snapshot sinks and for readers of exported documents.
type Envelope struct {
	SchemaVersion string    `json:"schemaVersion"`
	Cluster       string    `json:"cluster"`
	Inventory     string    `json:"inventory"`
	Generation    int64     `json:"generation"`
	ExportedAt    time.Time `json:"exportedAt"`
	ItemCount     int       `json:"itemCount"`
	Checksum      string    `json:"checksum"`
	Rows          []Row     `json:"rows"`
	// Writer is the agent writing the export. Sinks record it in their state (never in rows
	// or data files, so that an agent upgrade rewrites no row): hence no JSON name.
	Writer Writer `json:"-"`
	// Coverage says, per target, how much of its objects Rows describe (sorted by target).
	// Sinks store it in their state beside the rows, never inside a data file, hence no JSON
	// name: it changes without the rows changing.
	Coverage []Coverage `json:"-"`
}

// ChangeType is the kind of a change event.
type ChangeType string

// Change types.
const (
	ChangeUpsert ChangeType = "upsert"
	ChangeDelete ChangeType = "delete"
)

// ChangeEvent is what event sinks emit for each changed row. Row is the new row for an
// upsert and the last exported row for a delete.
type ChangeEvent struct {
	SchemaVersion string     `json:"schemaVersion"`
	Type          ChangeType `json:"type"`
	Cluster       string     `json:"cluster"`
	Inventory     string     `json:"inventory"`
	Key           string     `json:"key"`
	Row           *Row       `json:"row"`
	ObservedAt    time.Time  `json:"observedAt"`
}

// StateRecord is the state event sinks keep per (cluster, inventory) beside the change events
// (a compacted Kafka record, a NATS state message): which snapshot the sink holds, when it last
// changed and was last confirmed, and by whom. Readers tell it from a row's event by its
// kollect-event header, "state".
type StateRecord struct {
	SchemaVersion string `json:"schemaVersion"`
	Cluster       string `json:"cluster"`
	Inventory     string `json:"inventory"`
	Checksum      string `json:"checksum"`
	Rows          int    `json:"rows"`
	// ExportedAt is when the sink last received a snapshot with this checksum: the last change.
	ExportedAt time.Time `json:"exportedAt"`
	// ConfirmedAt is when the agent last confirmed the sink still holds it.
	ConfirmedAt time.Time `json:"confirmedAt"`
	// Writer is the agent that last exported or confirmed: the state's provenance. Row events
	// never carry it, so an agent upgrade sends no row again. Records from before it name none.
	Writer Writer `json:"writer"`
	// Contender and ContendedAt are the mark another instance of the same cluster name left
	// when Writer still held the inventory and its export or confirmation was refused: the
	// only record a refused agent writes. The holder's later records keep it, so the holder
	// reports the conflict too. Records without a refusal have neither.
	Contender   Writer    `json:"contender,omitzero"`
	ContendedAt time.Time `json:"contendedAt,omitzero"`
	// Coverage is the snapshot's coverage per target: which targets' rows are complete and
	// which are unknown (kept from earlier) and why.
	Coverage []Coverage `json:"coverage"`
}
