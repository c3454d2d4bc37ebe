package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestBuildCacheLinksOncePerRun: with KOLLECT_BUILD_CACHE set, the second package asking for a
// binary gets a copy of the first one's build (the cached file is not rewritten), and a
// different version is a different build.
func TestBuildCacheLinksOncePerRun(t *testing.T) {
	t.Setenv("KOLLECT_BUILD_CACHE", t.TempDir())
	first, err := BuildCommands(t.TempDir(), "v0.0.0-cache", "./testenv/cmd/pause")
	if err != nil {
		t.Fatal(err)
	}
	cached, err := filepath.Glob(filepath.Join(os.Getenv("KOLLECT_BUILD_CACHE"), "*", "pause"))
	if err != nil || len(cached) != 1 {
		t.Fatalf("cache holds %v (%v), want one pause binary", cached, err)
	}
	before, err := os.Stat(cached[0])
	if err != nil {
		t.Fatal(err)
	}
	second, err := BuildCommands(t.TempDir(), "v0.0.0-cache", "./testenv/cmd/pause")
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(cached[0])
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("the cached binary was built again")
	}
	a, _ := os.ReadFile(first[0])
	b, _ := os.ReadFile(second[0])
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatalf("the two packages got different binaries (%d and %d bytes)", len(a), len(b))
	}
	if _, err := BuildCommands(t.TempDir(), "v0.0.0-other", "./testenv/cmd/pause"); err != nil {
		t.Fatal(err)
	}
	if all, _ := filepath.Glob(filepath.Join(os.Getenv("KOLLECT_BUILD_CACHE"), "*", "pause")); len(all) != 2 {
		t.Fatalf("another version did not get its own build: %v", all)
	}
}
