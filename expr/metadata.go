package expr

import (
	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"k8s.io/client-go/util/jsonpath"
)

// CompileCELChecked is CompileCEL that also returns the checked expression, for callers that
// analyse what the expression reads (CELReadsOnlyMetadata).
func CompileCELChecked(src string) (cel.Program, *cel.Ast, error) {
	env, ast, err := check(src)
	if err != nil {
		return nil, nil, err
	}
	prg, err := program(env, ast)
	if err != nil {
		return nil, nil, err
	}
	return prg, ast, nil
}

// CELReadsOnlyMetadata reports whether a checked expression provably reads nothing of
// `object` but what lies under object.metadata, so that a metadata-only watch gives it
// everything it needs. It walks the checked AST: every use of `object` must be the root of a
// chain of field selections and constant string indexes whose first step is `metadata`
// (object.metadata.labels['a.b/c'], object["metadata"]["name"], object.?metadata.?name,
// has(object.metadata.x)). Anything else — the bare `object` (as a value, a function
// argument or the range of a macro), a dynamic index at the root, a first step other than
// metadata, or a node kind this function does not know — answers false: a full watch.
func CELReadsOnlyMetadata(ast *cel.Ast) bool {
	if ast == nil || !ast.IsChecked() {
		return false
	}
	return metadataOnlyExpr(ast.NativeRep().Expr())
}

// pathLevel classifies an expression as a path from `object`.
type pathLevel uint8

const (
	notPath   pathLevel = iota // not a path rooted at object
	rootPath                   // object itself
	metaPath                   // object.metadata or below
	otherPath                  // object.<anything but metadata> or below
)

// objectPath classifies e. For a path under metadata, dynamic index keys met on the way are
// returned so that the caller checks them too (object.metadata.labels[object.spec.x]).
func objectPath(e celast.Expr, keys *[]celast.Expr) pathLevel {
	switch e.Kind() {
	case celast.IdentKind:
		if e.AsIdent() == "object" {
			return rootPath
		}
		return notPath
	case celast.SelectKind:
		s := e.AsSelect()
		return step(objectPath(s.Operand(), keys), s.FieldName(), true)
	case celast.CallKind:
		c := e.AsCall()
		switch c.FunctionName() {
		case operators.Index, operators.OptIndex, operators.OptSelect:
		default:
			return notPath
		}
		args := c.Args()
		if c.IsMemberFunction() || len(args) != 2 {
			return notPath
		}
		operand := objectPath(args[0], keys)
		if operand == notPath {
			return notPath
		}
		if args[1].Kind() == celast.LiteralKind {
			if s, ok := args[1].AsLiteral().(types.String); ok {
				return step(operand, string(s), true)
			}
		}
		*keys = append(*keys, args[1])
		return step(operand, "", false)
	}
	return notPath
}

// step is the level reached from operand by selecting field (known is false for a key only
// known at run time).
func step(operand pathLevel, field string, known bool) pathLevel {
	switch operand {
	case rootPath:
		if known && field == "metadata" {
			return metaPath
		}
		return otherPath
	case metaPath, otherPath:
		return operand
	}
	return notPath
}

func metadataOnlyExpr(e celast.Expr) bool {
	var keys []celast.Expr
	switch objectPath(e, &keys) {
	case metaPath:
		for _, k := range keys {
			if !metadataOnlyExpr(k) {
				return false
			}
		}
		return true
	case rootPath, otherPath:
		return false
	}
	switch e.Kind() {
	case celast.LiteralKind:
		return true
	case celast.IdentKind:
		return true // another variable (a comprehension's); object itself is a path above
	case celast.SelectKind:
		return metadataOnlyExpr(e.AsSelect().Operand())
	case celast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() && !metadataOnlyExpr(c.Target()) {
			return false
		}
		return allMetadataOnly(c.Args())
	case celast.ListKind:
		return allMetadataOnly(e.AsList().Elements())
	case celast.MapKind:
		for _, en := range e.AsMap().Entries() {
			if en.Kind() != celast.MapEntryKind {
				return false
			}
			m := en.AsMapEntry()
			if !metadataOnlyExpr(m.Key()) || !metadataOnlyExpr(m.Value()) {
				return false
			}
		}
		return true
	case celast.StructKind:
		for _, en := range e.AsStruct().Fields() {
			if en.Kind() != celast.StructFieldKind || !metadataOnlyExpr(en.AsStructField().Value()) {
				return false
			}
		}
		return true
	case celast.ComprehensionKind:
		// The range, the accumulator and the loop's parts: any of them may read object. A
		// macro over object itself (object.all(k, ...)) has the bare object as its range.
		c := e.AsComprehension()
		return allMetadataOnly([]celast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()})
	}
	return false // a node kind not known here
}

func allMetadataOnly(es []celast.Expr) bool {
	for _, e := range es {
		if !metadataOnlyExpr(e) {
			return false
		}
	}
	return true
}

// JSONPathReadsOnlyMetadata reports whether a parsed template provably reads nothing but what
// lies under .metadata: every {…} action must begin with the field metadata and continue with
// fields, indexes, wildcards, recursive descent or filters (which are evaluated relative to
// the current value). The whole object ({@}, {$}), any other first step ({['spec']}, {..x},
// {.*}, {[*]}), range/end blocks (whose body is relative to the range) and any node this
// function does not know answer false.
func JSONPathReadsOnlyMetadata(p *JSONPath) bool {
	if p == nil || p.Tree == nil || p.Tree.Root == nil {
		return false
	}
	for _, n := range p.Tree.Root.Nodes {
		switch n := n.(type) {
		case *jsonpath.TextNode:
			continue
		case *jsonpath.ListNode:
			if !jsonPathActionMetadataOnly(n) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func jsonPathActionMetadataOnly(list *jsonpath.ListNode) bool {
	underMeta := false
	for _, n := range list.Nodes {
		if !underMeta {
			f, ok := n.(*jsonpath.FieldNode)
			if !ok {
				return false
			}
			if f.Value == "" { // the current value: still the root
				continue
			}
			if f.Value != "metadata" {
				return false
			}
			underMeta = true
			continue
		}
		switch n.(type) {
		case *jsonpath.FieldNode, *jsonpath.ArrayNode, *jsonpath.WildcardNode, *jsonpath.RecursiveNode, *jsonpath.FilterNode:
		default:
			return false
		}
	}
	return underMeta
}
