package eventbuf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

// Chunk is one numbered part of an envelope, a JSON document of its own.
type Chunk struct {
	Index, Count int
	Data         []byte
}

// chunkHeader is the envelope without rows plus the chunk numbering; Rows follow it.
type chunkHeader struct {
	SchemaVersion string    `json:"schemaVersion"`
	Cluster       string    `json:"cluster"`
	Inventory     string    `json:"inventory"`
	Generation    int64     `json:"generation"`
	ExportedAt    time.Time `json:"exportedAt"`
	ItemCount     int       `json:"itemCount"`
	Checksum      string    `json:"checksum"`
	Chunk         int       `json:"chunk"`
	Chunks        int       `json:"chunks"`
}

// headerReserve bounds the encoded chunkHeader (names are at most 253 bytes each).
const headerReserve = 1024

// Chunks splits the envelope into documents of at most maxBytes each, every one carrying the
// envelope's fields, its number and the total, so a reader reassembles a snapshot from the
// chunks that share a checksum. An empty snapshot is one chunk without rows.
func Chunks(env *export.Envelope, maxBytes int) ([]Chunk, error) {
	budget := maxBytes - headerReserve
	if budget <= 0 {
		return nil, fmt.Errorf("message size limit %d is too small for a snapshot chunk", maxBytes)
	}
	// Group rows first so every chunk can carry the total count.
	var groups [][]json.RawMessage
	var cur []json.RawMessage
	size := 0
	for i := range env.Rows {
		raw := env.Rows[i].CanonicalJSON()
		if len(raw)+1 > budget {
			return nil, sink.Terminalf("row %s is %d bytes, over the message size limit %d", env.Rows[i].Key(), len(raw), maxBytes)
		}
		if size+len(raw)+1 > budget {
			groups, cur, size = append(groups, cur), nil, 0
		}
		cur = append(cur, raw)
		size += len(raw) + 1
	}
	groups = append(groups, cur)
	out := make([]Chunk, len(groups))
	for i, rows := range groups {
		h := chunkHeader{export.SchemaVersion, env.Cluster, env.Inventory, env.Generation, env.ExportedAt,
			env.ItemCount, env.Checksum, i, len(groups)}
		head, err := json.Marshal(h)
		if err != nil {
			return nil, fmt.Errorf("encoding chunk header: %w", err)
		}
		var buf bytes.Buffer
		buf.Grow(len(head) + size + 16)
		buf.Write(head[:len(head)-1]) // drop '}' to append rows
		buf.WriteString(`,"rows":[`)
		for j, r := range rows {
			if j > 0 {
				buf.WriteByte(',')
			}
			buf.Write(r)
		}
		buf.WriteString("]}")
		out[i] = Chunk{Index: i, Count: len(groups), Data: buf.Bytes()}
	}
	return out, nil
}
