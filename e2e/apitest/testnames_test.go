package apitest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// namedTest is a test the documentation names as its proof: `TestSomething`.
	namedTest = regexp.MustCompile("`(Test[A-Z][A-Za-z0-9_]*)`")
	testFunc  = regexp.MustCompile(`(?m)^func (Test[A-Z][A-Za-z0-9_]*)\(`)
)

// TestDocsNameRealTests: every test the documentation cites as proof (docs/ and the README)
// exists in some _test.go file of the repository, so a renamed or deleted test cannot leave a
// claim without its evidence.
func TestDocsNameRealTests(t *testing.T) {
	root := "../.."
	defined := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range testFunc.FindAllStringSubmatch(string(raw), -1) {
				defined[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{filepath.Join(root, "README.md")}
	_ = filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return err
	})
	cited := 0
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, m := range namedTest.FindAllStringSubmatch(line, -1) {
				cited++
				if !defined[m[1]] {
					t.Errorf("%s:%d cites %s, which no _test.go file defines", page, i+1, m[1])
				}
			}
		}
	}
	if cited < 20 {
		t.Fatalf("only %d tests cited in the docs: is the pattern still right?", cited)
	}
}
