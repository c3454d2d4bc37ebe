package expr

import (
	"strings"

	"k8s.io/client-go/util/jsonpath"
)

// JSONPath is a parsed JSONPath template: Tree is the parse tree (for evaluators that walk
// simple paths themselves) and Eval client-go's evaluator, which tolerates missing keys.
type JSONPath struct {
	Tree *jsonpath.Parser
	Eval *jsonpath.JSONPath
}

// NormalizeJSONPath accepts both {.a.b} and .a.b, as kubectl does.
func NormalizeJSONPath(src string) string {
	src = strings.TrimSpace(src)
	if !strings.HasPrefix(src, "{") {
		src = "{" + src + "}"
	}
	return src
}

// ParseJSONPath parses a kubectl-style template; name labels it in client-go's errors. A
// template that does not parse is an *Error.
func ParseJSONPath(name, src string) (*JSONPath, error) {
	tmpl := NormalizeJSONPath(src)
	tree, err := jsonpath.Parse(name, tmpl)
	if err != nil {
		return nil, &Error{Language: JSONPathLanguage, Reason: ReasonCompile, Detail: err.Error()}
	}
	eval := jsonpath.New(name).AllowMissingKeys(true)
	if err := eval.Parse(tmpl); err != nil {
		return nil, &Error{Language: JSONPathLanguage, Reason: ReasonCompile, Detail: err.Error()}
	}
	return &JSONPath{Tree: tree, Eval: eval}, nil
}
