package bigquery

import (
	"fmt"
	"slices"
	"strings"

	bq "cloud.google.com/go/bigquery"

	"kollect.dev/agent/internal/export"
)

// coverageSchema is the coverage table's: one row per (cluster, inventory, target), written in
// the export's transaction. The row count is row_count, not rows: ROWS is a reserved keyword
// of GoogleSQL, and a column every query had to quote would be a trap.
var coverageSchema = bq.Schema{
	{Name: "cluster", Type: bq.StringFieldType, Required: true},
	{Name: "inventory", Type: bq.StringFieldType, Required: true},
	{Name: "target", Type: bq.StringFieldType, Required: true},
	{Name: "state", Type: bq.StringFieldType, Required: true},
	{Name: "row_count", Type: bq.IntegerFieldType, Required: true},
	{Name: "extraction_errors", Type: bq.IntegerFieldType, Required: true},
	{Name: "reason", Type: bq.StringFieldType, Required: true},
	{Name: "updated_at", Type: bq.TimestampFieldType, Required: true},
}

// batchCoverage is the envelope's coverage as the sink stores it: sorted by target, reasons
// bounded and valid UTF-8 (STRING must be), one entry per target. It works on a copy: every
// sink of the inventory shares the envelope's slice.
func batchCoverage(env *export.Envelope) []export.Coverage {
	c := export.NormalizeCoverage(slices.Clone(env.Coverage))
	for i := range c {
		c[i].Reason = strings.ToValidUTF8(c[i].Reason, "\uFFFD")
	}
	// One row per target, the first entry's: a duplicate can only be a bug upstream.
	return slices.CompactFunc(c, func(a, b export.Coverage) bool { return a.Target == b.Target })
}

// coverageChange is what an export changes in the coverage table: the entries to write (new
// or different) and the targets whose stored entries go (rewritten or no longer covered).
type coverageChange struct {
	write []export.Coverage
	drop  []string
}

func (c coverageChange) empty() bool { return len(c.write) == 0 && len(c.drop) == 0 }

// diffCoverage compares the stored entries with the batch's, both sorted by target.
func diffCoverage(stored, cov []export.Coverage) coverageChange {
	old := make(map[string]export.Coverage, len(stored))
	for _, c := range stored {
		old[c.Target] = c
	}
	var ch coverageChange
	for _, c := range cov {
		o, ok := old[c.Target]
		delete(old, c.Target)
		if ok && o == c {
			continue
		}
		ch.write = append(ch.write, c)
		// A new target's entry is dropped too: a concurrent writer's entry would otherwise
		// be duplicated (BigQuery has no primary key).
		ch.drop = append(ch.drop, c.Target)
	}
	for _, c := range stored {
		if _, gone := old[c.Target]; gone {
			ch.drop = append(ch.drop, c.Target)
		}
	}
	return ch
}

// coverageSQL renders the statements of a coverage change for the export's transaction, and
// their parameters: a DELETE of the dropped targets and one INSERT of the written entries,
// both bounded by the cluster and inventory. Scalar parameters, one per value, rather than an
// array: the emulator the tests run against and BigQuery agree on those, and an inventory has
// few targets.
func (s *Sink) coverageSQL(ch coverageChange) (string, []bq.QueryParameter) {
	if ch.empty() {
		return "", nil
	}
	table := s.ref(s.cfg.table + "_coverage")
	var sb strings.Builder
	var params []bq.QueryParameter
	if len(ch.drop) > 0 {
		names := make([]string, len(ch.drop))
		for i, t := range ch.drop {
			names[i] = fmt.Sprintf("@cov_drop_%d", i)
			params = append(params, bq.QueryParameter{Name: names[i][1:], Value: t})
		}
		fmt.Fprintf(&sb, "DELETE FROM %s WHERE cluster = @cluster AND inventory = @inventory AND target IN (%s);\n",
			table, strings.Join(names, ", "))
	}
	if len(ch.write) > 0 {
		values := make([]string, len(ch.write))
		for i, c := range ch.write {
			p := fmt.Sprintf("cov_%d_", i)
			values[i] = fmt.Sprintf("(CAST(@cluster AS STRING), CAST(@inventory AS STRING), CAST(@%starget AS STRING), CAST(@%sstate AS STRING), "+
				"CAST(@%srows AS INT64), CAST(@%serrors AS INT64), CAST(@%sreason AS STRING), CAST(@now AS TIMESTAMP))", p, p, p, p, p)
			params = append(params,
				bq.QueryParameter{Name: p + "target", Value: c.Target}, bq.QueryParameter{Name: p + "state", Value: string(c.State)},
				bq.QueryParameter{Name: p + "rows", Value: c.Rows}, bq.QueryParameter{Name: p + "errors", Value: c.ExtractionErrors},
				bq.QueryParameter{Name: p + "reason", Value: c.Reason})
		}
		fmt.Fprintf(&sb, "INSERT INTO %s (cluster, inventory, target, state, row_count, extraction_errors, reason, updated_at)\nVALUES %s;\n",
			table, strings.Join(values, ",\n  "))
	}
	return sb.String(), params
}

// coveredView is the view of every row with its target's coverage and its inventory's state:
// what a reader filters on to keep only rows that are complete and recently confirmed.
func (s *Sink) coveredView() string {
	return "SELECT r.cluster, r.inventory, r.target, r.api_group, r.version, r.kind, r.namespace, r.name, r.uid,\n" +
		"       r.attributes, r.first_seen, r.updated_at,\n" +
		"       c.state AS coverage_state, c.reason AS coverage_reason, c.updated_at AS coverage_updated_at,\n" +
		"       s.exported_at, s.confirmed_at\n" +
		"  FROM " + s.ref(s.cfg.table) + " r\n" +
		"  LEFT JOIN " + s.ref(s.cfg.table+"_coverage") + " c ON c.cluster = r.cluster AND c.inventory = r.inventory AND c.target = r.target\n" +
		"  LEFT JOIN " + s.ref(s.cfg.table+"_state") + " s ON s.cluster = r.cluster AND s.inventory = r.inventory"
}
