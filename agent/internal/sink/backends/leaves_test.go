package backends

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const wing = "kollect.dev/agent/internal/sink"

// shared are the packages of the wing a backend may import besides the contract: helpers,
// not backends (none of them is in the table).
var shared = map[string]bool{
	wing + "/snapshot": true, wing + "/gitrepo": true, wing + "/eventbuf": true, wing + "/sinktls": true,
	wing + "/egress": true,
}

// TestBackendsAreLeaves reads the imports of every package of the wing but this one and fails
// when one reaches outside the contract (package sink, the export data model, the API types
// and the shared helpers): a backend that imported the controller, the inventory or another
// backend would no longer be a plug-in. The backends are found through the table.
func TestBackendsAreLeaves(t *testing.T) {
	backends := map[string]bool{}
	for key, f := range Factories(nil) {
		fn := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name() // kollect.dev/…/sink/git.New
		pkg := fn[:strings.LastIndex(fn, ".")]
		if !strings.HasPrefix(pkg, wing+"/") {
			t.Errorf("%s: factory %s is not a backend of the wing", key, fn)
		}
		backends[pkg] = true
	}
	dirs, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() || d.Name() == "backends" {
			continue
		}
		pkg := wing + "/" + d.Name()
		files, err := filepath.Glob(filepath.Join("..", d.Name(), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, spec := range f.Imports {
				imp, _ := strconv.Unquote(spec.Path.Value)
				if !strings.HasPrefix(imp, "kollect.dev/") || allowed(imp) {
					continue
				}
				what := "outside the contract"
				if backends[imp] {
					what = "another backend"
				}
				t.Errorf("%s (%s) imports %s, %s", pkg, filepath.Base(file), imp, what)
			}
		}
	}
}

func allowed(imp string) bool {
	return imp == wing || shared[imp] || imp == "kollect.dev/agent/internal/export" ||
		strings.HasPrefix(imp, "kollect.dev/api/")
}
