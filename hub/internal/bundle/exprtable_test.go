package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"kollect.dev/expr/exprtest"
)

// bundleWith is a one-object bundle that carries src where c.Use says. JSON is YAML, and
// json.Marshal quotes any expression safely.
func bundleWith(t *testing.T, c exprtest.Case) string {
	t.Helper()
	src, err := json.Marshal(c.Expr)
	if err != nil {
		t.Fatal(err)
	}
	switch c.Use {
	case exprtest.AttributeCEL, exprtest.AttributeJSONPath:
		field := "cel"
		if c.Use == exprtest.AttributeJSONPath {
			field = "jsonPath"
		}
		return fmt.Sprintf(`{"apiVersion": "kollect.dev/v1alpha1", "kind": "KollectProfile",
  "metadata": {"name": "p", "namespace": "team-a"},
  "spec": {"target": {"group": "apps", "version": "v1", "kind": "Deployment"},
    "attributes": [{"name": "a", %q: %s}]}}`, field, src)
	case exprtest.Match:
		return fmt.Sprintf(`{"apiVersion": "kollect.dev/v1alpha1", "kind": "KollectTarget",
  "metadata": {"name": "t", "namespace": "team-a"},
  "spec": {"profileRef": {"name": "p"}, "match": %s}}`, src)
	}
	t.Fatalf("unknown use %q", c.Use)
	return ""
}

// TestSharedExpressionTable applies the table the agent's profile compiler is tested against
// (agent/internal/profile) to bundle validation: the hub accepts a bundle exactly when the
// agent compiles its expression, and refuses it with the same detail.
func TestSharedExpressionTable(t *testing.T) {
	v := newValidator(t)
	for _, c := range exprtest.Cases {
		t.Run(string(c.Use)+"/"+c.Name, func(t *testing.T) {
			_, err := v.Validate(context.Background(), bundleWith(t, c))
			if c.Refused == "" {
				if err != nil {
					t.Fatalf("%q refused: %v", c.Expr, err)
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) || len(inv.Problems) != 1 || !strings.Contains(inv.Problems[0], c.Refused) {
				t.Fatalf("%q: got %v, want one problem containing %q", c.Expr, err, c.Refused)
			}
		})
	}
}
