package export

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

func row(target, ns, name, uid string, attrs map[string]any) Row {
	raw, err := EncodeAttributes(attrs)
	if err != nil {
		panic(err)
	}
	return Row{Origin: &Origin{Cluster: "c1", Inventory: "inv", Target: target, Group: "apps", Version: "v1", Kind: "Deployment", Profile: "ns/p", ProfileGeneration: 2}, Namespace: ns, Name: name, UID: uid, Attributes: raw}
}

func TestCanonicalJSONSortsKeysAndKeepsUnicode(t *testing.T) {
	r := row("t", "ns", "a<b>", "u1", map[string]any{"z": 1, "a": "ü", "m": map[string]any{"y": true, "b": nil}})
	want := `{"attributes":{"a":"ü","m":{"b":null,"y":true},"z":1},"cluster":"c1","group":"apps","inventory":"inv","kind":"Deployment","name":"a<b>","namespace":"ns","profile":"ns/p","profileGeneration":2,"target":"t","uid":"u1","version":"v1"}`
	if got := string(r.CanonicalJSON()); got != want {
		t.Fatalf("canonical JSON\n got %s\nwant %s", got, want)
	}
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil || strings.TrimSpace(buf.String()) != want {
		t.Fatalf("encoding/json does not use the canonical form: %s %v", buf.String(), err)
	}
}

func TestChecksumIgnoresInputOrderButNotContent(t *testing.T) {
	a := []Row{row("t", "ns", "a", "1", map[string]any{"r": 1}), row("t", "ns", "b", "2", map[string]any{"r": 2})}
	b := []Row{a[1], a[0]}
	s1, s2 := NewSnapshot(append([]Row(nil), a...)), NewSnapshot(b)
	if s1.Checksum != s2.Checksum {
		t.Fatalf("checksum depends on input order: %s vs %s", s1.Checksum, s2.Checksum)
	}
	c := []Row{a[0], row("t", "ns", "b", "2", map[string]any{"r": 3})}
	if s3 := NewSnapshot(c); s3.Checksum == s1.Checksum {
		t.Fatal("checksum did not change with an attribute")
	}
	// Provenance is content: a new profile generation with the same values is a change.
	d := []Row{a[0], a[1]}
	d[1].ProfileGeneration++
	if s4 := NewSnapshot(d); s4.Checksum == s1.Checksum {
		t.Fatal("checksum did not change with the profile generation")
	}
	if s1.Rows[0].Name != "a" {
		t.Fatalf("rows not sorted: %v", s1.Rows)
	}
}

func TestComputeDiff(t *testing.T) {
	prev := NewSnapshot([]Row{
		row("t", "ns", "keep", "1", map[string]any{"r": 1}),
		row("t", "ns", "change", "2", map[string]any{"r": 1}),
		row("t", "ns", "drop", "3", map[string]any{"r": 1}),
	})
	next := NewSnapshot([]Row{
		row("t", "ns", "keep", "1", map[string]any{"r": 1}),
		row("t", "ns", "change", "2", map[string]any{"r": 2}),
		row("t", "ns", "new", "4", map[string]any{"r": 1}),
		row("t", "ns", "drop", "5", map[string]any{"r": 1}), // recreated: same name, new uid
	})
	d := Compute(prev, next)
	names := func(rows []Row) string {
		s := ""
		for _, r := range rows {
			s += r.Name + "/" + r.UID + " "
		}
		return s
	}
	if got := names(d.Added); got != "drop/5 new/4 " {
		t.Errorf("added = %s", got)
	}
	if got := names(d.Changed); got != "change/2 " {
		t.Errorf("changed = %s", got)
	}
	if got := names(d.Deleted); got != "drop/3 " {
		t.Errorf("deleted = %s", got)
	}
	if d2 := Compute(next, next); !d2.Empty() {
		t.Errorf("diff of a snapshot with itself is not empty: %+v", d2)
	}
	if full := Compute(nil, next); !full.Full || len(full.Upserts()) != 4 {
		t.Errorf("diff from nothing = %+v, want full with 4 upserts", full)
	}
}

func BenchmarkNewSnapshot10k(b *testing.B) {
	rows := make([]Row, 10_000)
	for i := range rows {
		rows[i] = row("t", fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("obj-%d", i), fmt.Sprint(i), map[string]any{"replicas": i, "image": "nginx:1.27", "team": "a"})
	}
	b.ReportAllocs()
	for b.Loop() {
		NewSnapshot(append([]Row(nil), rows...))
	}
}

// TestRowsShareTheirOrigin: a row is 80 bytes (the agent holds one per watched object), reads
// its origin's fields as its own, decodes with an origin of its own, and With leaves the
// origin other rows share alone.
func TestRowsShareTheirOrigin(t *testing.T) {
	if got := unsafe.Sizeof(Row{}); got > 80 {
		t.Fatalf("a row is %d bytes, want at most 80", got)
	}
	o := &Origin{Cluster: "c1", Inventory: "inv", Target: "t", Group: "apps", Version: "v1", Kind: "Deployment", Profile: "ns/p", ProfileGeneration: 2}
	a, b := NewRow(o, "ns", "a", "1", json.RawMessage(`{}`)), NewRow(o, "ns", "b", "2", json.RawMessage(`{}`))
	moved := b.With(func(o *Origin) { o.Cluster = "c2" })
	if a.Cluster != "c1" || b.Cluster != "c1" || moved.Cluster != "c2" || moved.Kind != "Deployment" {
		t.Fatalf("With changed the shared origin: %s %s %s", a.Cluster, b.Cluster, moved.Cluster)
	}
	var back Row
	if err := json.Unmarshal(a.CanonicalJSON(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Origin == o || *back.Origin != *o || string(back.CanonicalJSON()) != string(a.CanonicalJSON()) {
		t.Fatalf("decoded %+v %+v", back, back.Origin)
	}
	var empty Row
	if err := json.Unmarshal([]byte(`{"name":"x"}`), &empty); err != nil || empty.Origin == nil || empty.Name != "x" {
		t.Fatalf("a document without origin fields decodes to %+v, %v", empty, err)
	}
}
