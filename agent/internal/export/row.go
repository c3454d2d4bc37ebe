package export

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
)

// SchemaVersion is stamped on envelopes and change events; it changes only when the shape of
// a row changes incompatibly.
const SchemaVersion = "kollect.dev/v1"

// Row is one collected object for one target. Attributes is the profile's typed extraction
// result as a canonical JSON object (keys sorted); it is kept encoded because every sink
// either stores JSON (JSONB, documents, events) or decodes it once.
//
// What every row of one target in one inventory has in common is its Origin, which rows
// share: the agent holds a row per watched object, and seven string headers per row were
// 112 of its 208 bytes. Rows read the origin's fields as their own (row.Cluster); a row is
// built with one (NewRow, or a literal with Origin set) and never changes it: an origin may
// be shared by thousands of rows, so a row that needs another origin gets a new one (With).
type Row struct {
	*Origin
	Namespace  string          `json:"namespace"`
	Name       string          `json:"name"`
	UID        string          `json:"uid"`
	Attributes json.RawMessage `json:"attributes"`
}

// Origin is where rows belong and which rule produced them.
type Origin struct {
	Cluster   string `json:"cluster"`
	Inventory string `json:"inventory"`
	Target    string `json:"target"`
	Group     string `json:"group"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	// Profile (namespace/name) and ProfileGeneration name the rule that produced the row:
	// its provenance. A profile edit that leaves every value alone still changes the rows,
	// because a reader must be able to tell which rule a value came from.
	Profile           string `json:"profile"`
	ProfileGeneration int64  `json:"profileGeneration"`
}

// NewRow returns a row of origin o.
func NewRow(o *Origin, namespace, name, uid string, attributes json.RawMessage) Row {
	return Row{Origin: o, Namespace: namespace, Name: name, UID: uid, Attributes: attributes}
}

// With returns the row with a copy of its origin changed by edit; the row's own origin, which
// other rows may share, is left alone.
func (r Row) With(edit func(*Origin)) Row {
	o := Origin{}
	if r.Origin != nil {
		o = *r.Origin
	}
	edit(&o)
	r.Origin = &o
	return r
}

// UnmarshalJSON decodes a row with an origin of its own (never nil, whatever the document
// holds).
func (r *Row) UnmarshalJSON(data []byte) error {
	var flat struct {
		Origin
		Namespace  string          `json:"namespace"`
		Name       string          `json:"name"`
		UID        string          `json:"uid"`
		Attributes json.RawMessage `json:"attributes"`
	}
	if err := json.Unmarshal(data, &flat); err != nil {
		return err
	}
	o := flat.Origin
	*r = Row{Origin: &o, Namespace: flat.Namespace, Name: flat.Name, UID: flat.UID, Attributes: flat.Attributes}
	return nil
}

// Key identifies a row across the fleet.
type Key struct {
	Cluster, Inventory, Target, UID string
}

// String renders the key as cluster/inventory/target/uid, the message key of event sinks and
// the identity used in documents.
func (k Key) String() string {
	return k.Cluster + "/" + k.Inventory + "/" + k.Target + "/" + k.UID
}

// Key returns the row's identity key.
func (r *Row) Key() Key {
	return Key{Cluster: r.Cluster, Inventory: r.Inventory, Target: r.Target, UID: r.UID}
}

// APIVersion returns group/version, or version for the core group.
func (r *Row) APIVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// AttributeMap decodes the attributes; numbers decode as json.Number so integers survive.
func (r *Row) AttributeMap() (map[string]any, error) {
	out := map[string]any{}
	if len(r.Attributes) == 0 {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(r.Attributes))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("decoding attributes of %s: %w", r.Key(), err)
	}
	return out, nil
}

// canonicalRow orders the fields alphabetically, which makes encoding/json's output the
// canonical form (sorted keys at every level: attributes are already canonical).
type canonicalRow struct {
	Attributes json.RawMessage `json:"attributes"`
	Cluster    string          `json:"cluster"`
	Group      string          `json:"group"`
	Inventory  string          `json:"inventory"`
	Kind       string          `json:"kind"`
	Name       string          `json:"name"`
	Namespace  string          `json:"namespace"`
	Profile    string          `json:"profile"`
	ProfileGen int64           `json:"profileGeneration"`
	Target     string          `json:"target"`
	UID        string          `json:"uid"`
	Version    string          `json:"version"`
}

// CanonicalJSON is the row as one line of canonical JSON: keys sorted, no insignificant
// white space, no HTML escaping. It defines the row's digest and so the snapshot checksum.
func (r *Row) CanonicalJSON() []byte {
	var c canonicalEncoder
	return bytes.Clone(c.encode(r))
}

// RowEncoder writes rows as their canonical JSON, one after another, through one reused
// buffer: for writers of many rows (a file of a snapshot), where encoding/json would build,
// validate and copy each row's JSON again.
type RowEncoder struct{ c canonicalEncoder }

// Encode returns the row's canonical JSON, valid until the next call.
func (e *RowEncoder) Encode(r *Row) []byte { return e.c.encode(r) }

// canonicalEncoder encodes rows canonically into one reused buffer: a snapshot digests every
// row at every build, and an encoder and a buffer per row were most of a build's garbage.
type canonicalEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
	row canonicalRow // encoded through a pointer: a value would be boxed for every row
}

// encode returns the row's canonical JSON, valid until the next call.
func (c *canonicalEncoder) encode(r *Row) []byte {
	if c.enc == nil {
		c.enc = json.NewEncoder(&c.buf)
		c.enc.SetEscapeHTML(false)
	}
	c.buf.Reset()
	o := r.Origin
	if o == nil {
		o = &Origin{}
	}
	attrs := r.Attributes
	if len(attrs) == 0 {
		attrs = json.RawMessage("{}")
	}
	// Encoding a struct of strings, an integer and a valid RawMessage cannot fail.
	c.row = canonicalRow{attrs, o.Cluster, o.Group, o.Inventory, o.Kind, r.Name, r.Namespace, o.Profile,
		o.ProfileGeneration, o.Target, r.UID, o.Version}
	_ = c.enc.Encode(&c.row)
	return bytes.TrimSuffix(c.buf.Bytes(), []byte("\n"))
}

// MarshalJSON writes the canonical form, so every sink that writes rows as JSON agrees.
func (r Row) MarshalJSON() ([]byte, error) { return r.CanonicalJSON(), nil }

// Digest is the SHA-256 of the row's canonical JSON.
func (r *Row) Digest() [sha256.Size]byte {
	var c canonicalEncoder
	return sha256.Sum256(c.encode(r))
}

// Less orders rows canonically: by target, group, kind, namespace, name, then uid.
func Less(a, b *Row) bool { return Compare(a, b) < 0 }

// Compare orders rows canonically; see Less.
func Compare(a, b *Row) int {
	for _, pair := range [...][2]string{
		{a.Target, b.Target}, {a.Group, b.Group}, {a.Kind, b.Kind},
		{a.Namespace, b.Namespace}, {a.Name, b.Name}, {a.UID, b.UID},
	} {
		if c := strings.Compare(pair[0], pair[1]); c != 0 {
			return c
		}
	}
	return 0
}

// EncodeAttributes turns extracted values into the canonical JSON object rows carry.
// Values must be JSON-encodable (string, int64, float64, bool, []any, map[string]any).
func EncodeAttributes(values map[string]any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(values); err != nil { // maps encode with sorted keys
		return nil, fmt.Errorf("encoding attributes: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
