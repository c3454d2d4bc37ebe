package eventbuf

import (
	"encoding/json"
	"time"

	"kollect.dev/agent/internal/export"
)

// Encode renders the event as the export contract's ChangeEvent JSON (the same document
// json.Marshal(e.ChangeEvent()) yields, field for field) and returns the row's canonical JSON
// within it. Writing it directly avoids encoding/json re-compacting every row, which
// dominated the cost of a large export.
func (e *Event) Encode() (event, row []byte) {
	row = e.Row.CanonicalJSON()
	buf := make([]byte, 0, len(row)+len(e.Key)+len(e.Row.Cluster)+len(e.Row.Inventory)+160)
	buf = append(buf, `{"schemaVersion":`...)
	buf = appendString(buf, export.SchemaVersion)
	buf = append(buf, `,"type":`...)
	buf = appendString(buf, string(e.Type))
	buf = append(buf, `,"cluster":`...)
	buf = appendString(buf, e.Row.Cluster)
	buf = append(buf, `,"inventory":`...)
	buf = appendString(buf, e.Row.Inventory)
	buf = append(buf, `,"key":`...)
	buf = appendString(buf, e.Key)
	buf = append(buf, `,"row":`...)
	start := len(buf)
	buf = append(buf, row...)
	row = buf[start:len(buf):len(buf)]
	buf = append(buf, `,"observedAt":"`...)
	buf = e.ObservedAt.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `"}`...)
	return buf, row
}

// appendString appends s as a JSON string. Names and keys are plain ASCII in practice; the
// general case goes through encoding/json for exact escaping.
func appendString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			q, _ := json.Marshal(s) // a string always encodes
			return append(buf, q...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
