package rollout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// TestReasonsReadAreSetByAgent: every condition reason the gates treat specially is one the
// agent actually sets. It reads the agent's source (the hub may not import it): the reasons are
// the constants of api/v1alpha1/conditions.go, and the agent sets one when its code names it.
// A reason dropped from the agent, or a gate keyed on a reason the agent never sends, fails here.
func TestReasonsReadAreSetByAgent(t *testing.T) {
	byValue := reasonConstants(t, filepath.Join("..", "..", "..", "api", "v1alpha1", "conditions.go"))
	used := map[string]bool{}
	fset := token.NewFileSet()
	root := filepath.Join("..", "..", "..", "agent", "internal")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "kollectv1" {
					used[sel.Sel.Name] = true
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(used) == 0 {
		t.Fatalf("found no use of kollectv1 under %s", root)
	}
	for r := range startingReasons {
		name, ok := byValue[r]
		if !ok {
			t.Errorf("the gates wait through reason %q, which api/v1alpha1/conditions.go does not define", r)
			continue
		}
		if !used[name] {
			t.Errorf("the gates wait through %s (%q), which the agent never sets", name, r)
		}
	}
	if len(startingReasons) != len(kollectv1.TransientReasons) {
		t.Errorf("startingReasons has %d reasons, kollectv1.TransientReasons %d", len(startingReasons), len(kollectv1.TransientReasons))
	}
}

// reasonConstants maps each Reason* constant's value to its name.
func reasonConstants(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
					v, _ := strconv.Unquote(lit.Value)
					out[v] = name.Name
				}
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d reasons in %s", len(out), path)
	}
	return out
}
