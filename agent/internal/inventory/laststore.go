package inventory

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"kollect.dev/agent/internal/export"
)

// lastStore keeps each inventory's last built snapshot in a file under the agent's cache
// directory (--cache-dir), so that an agent that starts while a target cannot be collected (a
// kind forbidden, a kind not served, a KollectTarget deleted) carries that target's last rows
// over from the file instead of holding the whole inventory until the target is back.
//
// Why a file and not a read-back from the sinks: a target whose rows are unknown is not empty,
// so an export must hold its last rows, and only the agent has them in one shape for every
// sink type: a Parquet object, a Postgres table and a Kafka topic would each need their own
// reader, and an inventory with several sinks would have to pick one to trust. The chart mounts an emptyDir at --cache-dir, which outlives a container restart but not a new
// pod; a new pod, or an empty or unreadable file, falls back to holding the export, as before,
// and the inventory says so.
type lastStore struct {
	dir string // "" stores nothing
}

// stored is the file's content: the snapshot's rows with their checksum, which load verifies.
type stored struct {
	Checksum string       `json:"checksum"`
	BuiltAt  time.Time    `json:"builtAt"`
	Rows     []export.Row `json:"rows"`
}

// writeStored writes the stored form of snap one row at a time. Encoding the whole struct at
// once would first build the entire document in memory: at 100k rows, tens of MiB for every
// inventory saving at the same moment, the largest part of the agent's peak at its first
// export.
func writeStored(w io.Writer, snap *export.Snapshot, at time.Time) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	head, err := json.Marshal(stored{Checksum: snap.Checksum, BuiltAt: at.UTC()})
	if err != nil {
		return err
	}
	// {"checksum":…,"builtAt":…,"rows":null} → {"checksum":…,"builtAt":…,"rows":[
	bw.Write(bytes.TrimSuffix(head, []byte("null}")))
	bw.WriteByte('[')
	var enc export.RowEncoder
	for i := range snap.Rows {
		if i > 0 {
			bw.WriteByte(',')
		}
		if _, err := bw.Write(enc.Encode(&snap.Rows[i])); err != nil {
			return fmt.Errorf("writing row %d: %w", i, err)
		}
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// readStored reads what writeStored wrote (or the single document earlier agents wrote), a row
// at a time for the same reason.
func readStored(r io.Reader) (stored, error) {
	var st stored
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return st, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return st, err
		}
		switch tok {
		case "checksum":
			err = dec.Decode(&st.Checksum)
		case "builtAt":
			err = dec.Decode(&st.BuiltAt)
		case "rows":
			err = decodeRows(dec, &st.Rows)
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return st, fmt.Errorf("decoding %v: %w", tok, err)
		}
	}
	return st, expectDelim(dec, '}')
}

func decodeRows(dec *json.Decoder, rows *[]export.Row) error {
	if err := expectDelim(dec, '['); err != nil {
		return err
	}
	// Decoded rows have an origin each; rows of one target share one again, as built rows do.
	origins := map[export.Origin]*export.Origin{}
	for dec.More() {
		*rows = append(*rows, export.Row{})
		r := &(*rows)[len(*rows)-1]
		if err := dec.Decode(r); err != nil {
			return err
		}
		if o, ok := origins[*r.Origin]; ok {
			r.Origin = o
		} else {
			origins[*r.Origin] = r.Origin
		}
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("want %q, found %v", want, tok)
	}
	return nil
}

// path names the file of an inventory. Kubernetes names hold no "_", so namespace_name (and
// _name for a cluster inventory) cannot collide.
func (s lastStore) path(k Key) string {
	return filepath.Join(s.dir, k.Namespace+"_"+k.Name+".json.gz")
}

// save writes snap atomically (a temporary file renamed over the old one), readable only by
// the agent: rows can hold whatever a profile extracts.
func (s lastStore) save(k Key, snap *export.Snapshot, at time.Time) error {
	if s.dir == "" {
		return nil
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename there is nothing left to remove
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(f)
	err = writeStored(zw, snap, at)
	if err = errors.Join(err, zw.Close(), f.Close()); err != nil {
		return err
	}
	return os.Rename(f.Name(), s.path(k))
}

// gzipWriters reuses compressors across saves: each holds about a MiB of tables, and after a
// start every inventory saves at once (at most GOMAXPROCS at a time, Manager.builds).
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // a valid level cannot fail
	return zw
}}

// load returns the inventory's stored snapshot and when it was built, or nil when there is
// none. A file whose rows do not add up to its checksum is an error, never a snapshot.
func (s lastStore) load(k Key) (*export.Snapshot, time.Time, error) {
	if s.dir == "" {
		return nil, time.Time{}, nil
	}
	f, err := os.Open(s.path(k))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, time.Time{}, err
	}
	st, err := readStored(zr)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", s.path(k), err)
	}
	snap := export.NewSnapshot(st.Rows)
	if snap.Checksum != st.Checksum {
		return nil, time.Time{}, fmt.Errorf("%s: rows do not match the checksum %s", s.path(k), export.ShortChecksum(st.Checksum))
	}
	return snap, st.BuiltAt, nil
}

// remove deletes the inventory's file, once the inventory is gone.
func (s lastStore) remove(k Key) {
	if s.dir != "" {
		_ = os.Remove(s.path(k))
	}
}
