package expr_test

import (
	"errors"
	"strings"
	"testing"

	"kollect.dev/expr"
	"kollect.dev/expr/exprtest"
)

func compile(c exprtest.Case) error {
	var err error
	switch c.Use {
	case exprtest.AttributeCEL:
		_, err = expr.CompileCEL(c.Expr)
	case exprtest.Match:
		_, err = expr.CompileMatch(c.Expr)
	case exprtest.AttributeJSONPath:
		_, err = expr.ParseJSONPath("attribute", c.Expr)
	}
	return err
}

func TestCases(t *testing.T) {
	for _, c := range exprtest.Cases {
		t.Run(string(c.Use)+"/"+c.Name, func(t *testing.T) {
			err := compile(c)
			if c.Refused == "" {
				if err != nil {
					t.Fatalf("%q refused: %v", c.Expr, err)
				}
				return
			}
			var e *expr.Error
			if !errors.As(err, &e) {
				t.Fatalf("%q: got %v, want an *expr.Error containing %q", c.Expr, err, c.Refused)
			}
			if !strings.Contains(e.Detail, c.Refused) {
				t.Fatalf("%q: detail %q lacks %q", c.Expr, e.Detail, c.Refused)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		use, src, prefix string
	}{
		{"cel", "object.spec +", "CEL compile error: ERROR: <input>:1:"},
		{"match", "'yes'", "CEL match must return bool, not string"},
		{"jsonpath", "{.a[}", "JSONPath parse error: "},
	} {
		var err error
		switch tc.use {
		case "cel":
			_, err = expr.CompileCEL(tc.src)
		case "match":
			_, err = expr.CompileMatch(tc.src)
		case "jsonpath":
			_, err = expr.ParseJSONPath("x", tc.src)
		}
		if err == nil || !strings.HasPrefix(err.Error(), tc.prefix) {
			t.Errorf("%s %q: %v, want prefix %q", tc.use, tc.src, err, tc.prefix)
		}
		if d := expr.Detail(err); strings.HasPrefix(d, "CEL ") || strings.HasPrefix(d, "JSONPath ") {
			t.Errorf("Detail keeps the prefix: %q", d)
		}
	}
}

// An expression whose cost depends on the object compiles and is stopped at run time.
func TestCostLimitAtRunTime(t *testing.T) {
	prg, err := expr.CompileCEL("object.items.map(a, object.items.map(b, object.items.map(c, a + b + c))).size()")
	if err != nil {
		t.Fatal(err)
	}
	items := make([]any, 200)
	for i := range items {
		items[i] = int64(i)
	}
	if _, _, err := prg.Eval(map[string]any{"object": map[string]any{"items": items[:3]}}); err != nil {
		t.Fatalf("small object: %v", err)
	}
	if _, _, err := prg.Eval(map[string]any{"object": map[string]any{"items": items}}); err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("large object: %v, want a cost limit error", err)
	}
}
