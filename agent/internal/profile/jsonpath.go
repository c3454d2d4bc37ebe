package profile

import (
	"fmt"

	"k8s.io/client-go/util/jsonpath"

	"kollect.dev/expr"
)

// jsonPathExtractor runs a compiled JSONPath template. Templates that are a plain chain of
// fields, indexes and [*] run on walk, which reads the object in place without reflection;
// anything else (filters, recursive descent, unions, slices) runs through client-go.
type jsonPathExtractor struct {
	steps []step // nil when the template needs the general evaluator
	full  *jsonpath.JSONPath
	multi bool // the template can yield several values: the result is a list
	// metadataOnly: the parsed template provably reads only .metadata
	// (expr.JSONPathReadsOnlyMetadata).
	metadataOnly bool
}

type stepKind uint8

const (
	stepField stepKind = iota
	stepIndex
	stepAll
)

type step struct {
	kind  stepKind
	field string
	index int
}

// compileJSONPath parses src in the shared dialect (kollect.dev/expr: kubectl templates, with
// or without braces) and picks the walker when the template is a plain field chain.
func compileJSONPath(name, src string) (*jsonPathExtractor, error) {
	p, err := expr.ParseJSONPath(name, src)
	if err != nil {
		return nil, fmt.Errorf("invalid JSONPath %q: %w", src, &detailError{err: err})
	}
	x := &jsonPathExtractor{full: p.Eval, metadataOnly: expr.JSONPathReadsOnlyMetadata(p)}
	if steps, multi, ok := simpleSteps(p.Tree.Root); ok {
		x.steps, x.multi = steps, multi
	} else {
		x.multi = true
	}
	return x, nil
}

// simpleSteps turns a template made of one field chain into steps; ok is false for anything
// the walker does not handle.
func simpleSteps(root *jsonpath.ListNode) (steps []step, multi, ok bool) {
	if len(root.Nodes) != 1 {
		return nil, false, false
	}
	list, isList := root.Nodes[0].(*jsonpath.ListNode)
	if !isList {
		return nil, false, false
	}
	for _, n := range list.Nodes {
		switch n := n.(type) {
		case *jsonpath.FieldNode:
			if n.Value == "" { // the leading "." of the template
				continue
			}
			steps = append(steps, step{kind: stepField, field: n.Value})
		case *jsonpath.ArrayNode:
			p := n.Params
			switch {
			case !p[0].Known && !p[1].Known && !p[2].Known: // [*] parses as [:]
				steps = append(steps, step{kind: stepAll})
				multi = true
			case p[0].Known && p[0].Value >= 0 && !p[2].Known &&
				(!p[1].Known || p[1].Value == p[0].Value+1): // [i], which the parser stores as [i:i+1]
				steps = append(steps, step{kind: stepIndex, index: p[0].Value})
			default:
				return nil, false, false
			}
		case *jsonpath.WildcardNode:
			steps = append(steps, step{kind: stepAll})
			multi = true
		default:
			return nil, false, false
		}
	}
	return steps, multi, true
}

// extract returns the values the template finds; found is false when nothing matched.
func (x *jsonPathExtractor) extract(obj map[string]any) (any, bool, error) {
	if x.steps == nil {
		return x.extractFull(obj)
	}
	if !x.multi {
		v, ok := walkOne(obj, x.steps)
		return v, ok, nil
	}
	var out []any
	walkAll(obj, x.steps, &out)
	return out, len(out) > 0, nil
}

func walkOne(cur any, steps []step) (any, bool) {
	for _, s := range steps {
		switch s.kind {
		case stepField:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil, false
			}
			if cur, ok = m[s.field]; !ok {
				return nil, false
			}
		case stepIndex:
			l, ok := cur.([]any)
			if !ok || s.index >= len(l) {
				return nil, false
			}
			cur = l[s.index]
		}
	}
	return cur, true
}

func walkAll(cur any, steps []step, out *[]any) {
	for i, s := range steps {
		if s.kind != stepAll {
			var ok bool
			if cur, ok = walkOne(cur, steps[i:i+1]); !ok {
				return
			}
			continue
		}
		switch c := cur.(type) {
		case []any:
			for _, e := range c {
				walkAll(e, steps[i+1:], out)
			}
		case map[string]any:
			for _, e := range c {
				walkAll(e, steps[i+1:], out)
			}
		}
		return
	}
	*out = append(*out, cur)
}

func (x *jsonPathExtractor) extractFull(obj map[string]any) (any, bool, error) {
	results, err := x.full.FindResults(obj)
	if err != nil {
		return nil, false, fmt.Errorf("evaluating JSONPath: %w", err)
	}
	var out []any
	for _, set := range results {
		for _, v := range set {
			if v.IsValid() && v.CanInterface() {
				out = append(out, v.Interface())
			}
		}
	}
	return out, len(out) > 0, nil
}
