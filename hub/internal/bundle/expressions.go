package bundle

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kollect.dev/expr"
)

// checkExpressions returns one problem per expression of obj that the agent would refuse
// (profile attributes in CEL or JSONPath, target matches in CEL). It calls the functions the
// agent compiles with (kollect.dev/expr), so an expression that passes here compiles there.
func checkExpressions(kind string, obj map[string]any) []string {
	var problems []string
	switch kind {
	case "KollectProfile":
		attrs, _, _ := unstructured.NestedSlice(obj, "spec", "attributes")
		for i, a := range attrs {
			attr, ok := a.(map[string]any)
			if !ok {
				continue
			}
			if src, _ := attr["cel"].(string); src != "" {
				if _, err := expr.CompileCEL(src); err != nil {
					problems = append(problems, fmt.Sprintf("spec.attributes[%d] (%v).cel: %v", i, attr["name"], err))
				}
			}
			if src, _ := attr["jsonPath"].(string); src != "" {
				if _, err := expr.ParseJSONPath("attribute", src); err != nil {
					problems = append(problems, fmt.Sprintf("spec.attributes[%d] (%v).jsonPath: %v", i, attr["name"], err))
				}
			}
		}
	case "KollectTarget", "KollectClusterTarget":
		if src, _, _ := unstructured.NestedString(obj, "spec", "match"); src != "" {
			if _, err := expr.CompileMatch(src); err != nil {
				problems = append(problems, fmt.Sprintf("spec.match: %v", err))
			}
		}
	}
	return problems
}
