package profile

import (
	"strings"
	"testing"

	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/expr/exprtest"
)

// TestSharedExpressionTable applies the table the hub's bundle validation is tested against
// (hub/internal/bundle) to the agent's compilers: attributes through Compile, matches through
// CompileMatch. Both must reach the same verdict on every entry.
func TestSharedExpressionTable(t *testing.T) {
	for _, c := range exprtest.Cases {
		t.Run(string(c.Use)+"/"+c.Name, func(t *testing.T) {
			var err error
			switch c.Use {
			case exprtest.AttributeCEL:
				_, err = Compile(profileOf(kollectv1.Attribute{Name: "a", CEL: c.Expr}))
			case exprtest.AttributeJSONPath:
				_, err = Compile(profileOf(kollectv1.Attribute{Name: "a", JSONPath: c.Expr}))
			case exprtest.Match:
				_, err = CompileMatch(c.Expr)
			default:
				t.Fatalf("unknown use %q", c.Use)
			}
			if c.Refused == "" {
				if err != nil {
					t.Fatalf("%q refused: %v", c.Expr, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.Refused) {
				t.Fatalf("%q: got %v, want a refusal containing %q", c.Expr, err, c.Refused)
			}
		})
	}
}
