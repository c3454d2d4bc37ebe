package bundle

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/client-go/util/jsonpath"
)

// exprChecker checks the expressions a bundle carries for the agent (profile attributes in
// CEL or JSONPath, target matches in CEL) the way the agent compiles them — CEL in the same
// environment — so that an expression the agent would reject never leaves the hub.
type exprChecker struct {
	env *cel.Env
}

func newExprChecker() (*exprChecker, error) {
	env, err := cel.NewEnv(
		cel.Variable("object", cel.DynType),
		cel.OptionalTypes(),
		cel.HomogeneousAggregateLiterals(),
		library.Lists(), library.Regex(), library.URLs(), library.Quantity(), library.IP(), library.CIDR(),
		ext.Strings(ext.StringsVersion(2)),
	)
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	return &exprChecker{env: env}, nil
}

// check returns one problem per expression of obj that does not compile.
func (c *exprChecker) check(kind string, obj map[string]any) []string {
	var problems []string
	switch kind {
	case "KollectProfile":
		attrs, _, _ := unstructured.NestedSlice(obj, "spec", "attributes")
		for i, a := range attrs {
			attr, ok := a.(map[string]any)
			if !ok {
				continue
			}
			if expr, _ := attr["cel"].(string); expr != "" {
				if err := c.compile(expr, false); err != nil {
					problems = append(problems, fmt.Sprintf("spec.attributes[%d] (%v).cel: %v", i, attr["name"], err))
				}
			}
			if expr, _ := attr["jsonPath"].(string); expr != "" {
				if err := parseJSONPath(expr); err != nil {
					problems = append(problems, fmt.Sprintf("spec.attributes[%d] (%v).jsonPath: %v", i, attr["name"], err))
				}
			}
		}
	case "KollectTarget", "KollectClusterTarget":
		expr, _, _ := unstructured.NestedString(obj, "spec", "match")
		if expr != "" {
			if err := c.compile(expr, true); err != nil {
				problems = append(problems, fmt.Sprintf("spec.match: %v", err))
			}
		}
	}
	return problems
}

// parseJSONPath parses a kubectl-style template; like kubectl (and the agent) it accepts the
// path with or without its braces.
func parseJSONPath(expr string) error {
	tmpl := strings.TrimSpace(expr)
	if !strings.HasPrefix(tmpl, "{") {
		tmpl = "{" + tmpl + "}"
	}
	if _, err := jsonpath.Parse("attribute", tmpl); err != nil {
		return fmt.Errorf("JSONPath parse error: %w", err)
	}
	return nil
}

func (c *exprChecker) compile(expr string, wantBool bool) error {
	ast, iss := c.env.Compile(expr)
	if iss.Err() != nil {
		return fmt.Errorf("CEL compile error: %w", iss.Err())
	}
	if wantBool {
		out := ast.OutputType()
		if !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
			return fmt.Errorf("CEL match must return bool, not %s", out)
		}
	}
	return nil
}
