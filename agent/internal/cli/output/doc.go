// Package output prints exported rows as a table, JSON, YAML or NDJSON. JSON, YAML and NDJSON
// carry the rows exactly as sinks receive them (the export contract's field names; NDJSON is
// the canonical JSON that defines the checksum).
package output
