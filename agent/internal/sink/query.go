package sink

import (
	"time"

	"kollect.dev/agent/internal/export"
)

// RowFilter selects stored rows for the database sinks' Query (and `kollect query`). Empty
// fields match everything. Attributes match by containment: {"labels": {"team": "a"}} matches
// any row whose labels include team=a.
type RowFilter struct {
	Cluster, Inventory, Kind, Namespace, Name string
	Attributes                                map[string]any
	// Limit caps the result; 0 means 1000.
	Limit int
	// AsOf, when set, reads the rows as they were at that time from the sink's history
	// instead of the current rows (postgres with history: true only).
	AsOf time.Time
}

// StoredRow is a row as a database sink holds it, with its bookkeeping times.
type StoredRow struct {
	export.Row
	FirstSeen time.Time `json:"firstSeen"`
	UpdatedAt time.Time `json:"updatedAt"`
}
