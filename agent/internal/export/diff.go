package export

// Diff is what changed between the snapshot a sink accepted last and the current one.
type Diff struct {
	// Full is true when the sink's previous content is not known to the delivery worker (first
	// export, or after an agent restart with changed data). Upserts then hold every row and Deletes is
	// empty: a sink must reconcile, removing rows of this cluster and inventory that are not in
	// the snapshot.
	Full bool
	// Added rows are new keys; Changed rows kept their key but not their content.
	Added, Changed []Row
	// Deleted rows are the last exported versions of keys that disappeared.
	Deleted []Row
}

// Upserts returns Added followed by Changed.
func (d *Diff) Upserts() []Row {
	out := make([]Row, 0, len(d.Added)+len(d.Changed))
	return append(append(out, d.Added...), d.Changed...)
}

// Empty reports whether nothing changed.
func (d *Diff) Empty() bool {
	return !d.Full && len(d.Added) == 0 && len(d.Changed) == 0 && len(d.Deleted) == 0
}

// Compute diffs two snapshots with one merge pass over their sorted rows. A nil prev yields a
// Full diff.
func Compute(prev, next *Snapshot) Diff {
	if prev == nil {
		return Diff{Full: true, Added: next.Rows}
	}
	var d Diff
	i, j := 0, 0
	for i < len(prev.Rows) || j < len(next.Rows) {
		switch {
		case i == len(prev.Rows):
			d.Added = append(d.Added, next.Rows[j])
			j++
		case j == len(next.Rows):
			d.Deleted = append(d.Deleted, prev.Rows[i])
			i++
		default:
			// Names and namespaces are immutable, so equal sort fields mean an equal key.
			switch c := Compare(&prev.Rows[i], &next.Rows[j]); {
			case c < 0:
				d.Deleted = append(d.Deleted, prev.Rows[i])
				i++
			case c > 0:
				d.Added = append(d.Added, next.Rows[j])
				j++
			default:
				if prev.digests[i] != next.digests[j] {
					d.Changed = append(d.Changed, next.Rows[j])
				}
				i++
				j++
			}
		}
	}
	return d
}
