package inventory

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"testing"
	"time"

	"kollect.dev/agent/internal/export"
)

// TestLastStoreKeepsOnlyWhatAddsUp: a saved snapshot loads back with its checksum, an absent
// one is nothing, and a file whose rows were altered is refused rather than carried over.
func TestLastStoreKeepsOnlyWhatAddsUp(t *testing.T) {
	s := lastStore{dir: t.TempDir()}
	k := Key{Namespace: "team", Name: "inv"}
	if snap, _, err := s.load(k); snap != nil || err != nil {
		t.Fatalf("nothing saved: got %v, %v", snap, err)
	}
	rows := []export.Row{{Origin: &export.Origin{Target: "team/b"}, UID: "2", Name: "b", Attributes: []byte(`{"x":1}`)},
		{Origin: &export.Origin{Target: "team/a"}, UID: "1", Name: "a", Attributes: []byte(`{}`)}}
	want := export.NewSnapshot(rows)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := s.save(k, want, at); err != nil {
		t.Fatal(err)
	}
	got, gotAt, err := s.load(k)
	if err != nil || got.Checksum != want.Checksum || got.Len() != 2 || !gotAt.Equal(at) {
		t.Fatalf("loaded %v at %v, %v; want %s at %v", got, gotAt, err, want.Checksum, at)
	}

	// The same file with one row's attributes changed no longer adds up to its checksum.
	altered := stored{Checksum: want.Checksum, BuiltAt: at, Rows: append([]export.Row(nil), want.Rows...)}
	altered.Rows[0].Attributes = []byte(`{"x":2}`)
	f, err := os.Create(s.path(k))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	_ = json.NewEncoder(zw).Encode(altered)
	_ = zw.Close()
	_ = f.Close()
	if snap, _, err := s.load(k); snap != nil || err == nil {
		t.Fatalf("an altered file loaded: %v, %v", snap, err)
	}

	// The single JSON document earlier agents wrote still loads.
	writeOld := func(st stored) {
		f, err := os.Create(s.path(k))
		if err != nil {
			t.Fatal(err)
		}
		zw := gzip.NewWriter(f)
		_ = json.NewEncoder(zw).Encode(st)
		_ = zw.Close()
		_ = f.Close()
	}
	writeOld(stored{Checksum: want.Checksum, BuiltAt: at, Rows: want.Rows})
	if got, _, err := s.load(k); err != nil || got.Checksum != want.Checksum || got.Len() != 2 {
		t.Fatalf("a file of the earlier format: loaded %v, %v", got, err)
	}

	// An empty snapshot round-trips too.
	empty := export.NewSnapshot(nil)
	if err := s.save(k, empty, at); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.load(k); err != nil || got.Checksum != empty.Checksum || got.Len() != 0 {
		t.Fatalf("empty snapshot: loaded %v, %v", got, err)
	}

	s.remove(k)
	if _, err := os.Stat(s.path(k)); !os.IsNotExist(err) {
		t.Fatalf("removed inventory's file still there: %v", err)
	}
}
