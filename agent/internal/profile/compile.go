package profile

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"google.golang.org/protobuf/types/known/structpb"

	"kollect.dev/agent/internal/export"
	kollectv1 "kollect.dev/api/v1alpha1"
	"kollect.dev/expr"
)

// Compiled is a profile ready to run: every attribute compiled once.
type Compiled struct {
	// Generation of the KollectProfile it was compiled from.
	Generation int64
	// GVK is the kind the profile reads.
	GVK kollectv1.GroupVersionKind
	// MetadataOnly is true when every attribute reads only metadata.
	MetadataOnly bool
	// Decode, when set, is the decoder whose document the attributes read instead of the
	// object (it needs the whole object, so MetadataOnly is false); DecodeValues asks it for
	// the object's redacted values.
	Decode       kollectv1.Decoder
	DecodeValues bool
	attrs        []attribute
	// full, when the profile sets fullObject, exports the whole object beside the attributes.
	full *fullObject
}

type attribute struct {
	name     string
	typ      kollectv1.AttributeType
	optional bool
	path     *jsonPathExtractor
	program  *expr.Budgeted
}

// CompileError lists every attribute that failed to compile, with the compiler's message.
type CompileError struct {
	Problems []string
}

func (e *CompileError) Error() string { return strings.Join(e.Problems, "; ") }

// Compile compiles every attribute of the profile. All problems are reported at once so a
// user fixes them in one round.
func Compile(p *kollectv1.KollectProfile) (*Compiled, error) {
	c := &Compiled{Generation: p.Generation, GVK: p.Spec.Target, MetadataOnly: true}
	var problems []string
	problems = append(problems, c.compileDecode(&p.Spec)...)
	for _, a := range p.Spec.Attributes {
		attr := attribute{name: a.Name, typ: a.Type, optional: a.Optional}
		switch {
		case a.JSONPath != "" && a.CEL != "":
			problems = append(problems, fmt.Sprintf("attribute %s: set only one of jsonPath and cel", a.Name))
			continue
		case a.JSONPath != "":
			x, err := compileJSONPath(a.Name, a.JSONPath)
			if err != nil {
				problems = append(problems, fmt.Sprintf("attribute %s: %v", a.Name, err))
				continue
			}
			attr.path = x
			c.MetadataOnly = c.MetadataOnly && x.metadataOnly
		case a.CEL != "":
			prg, metadataOnly, err := compileAttributeCEL(a.CEL)
			if err != nil {
				problems = append(problems, fmt.Sprintf("attribute %s: CEL: %v", a.Name, err))
				continue
			}
			attr.program = prg
			c.MetadataOnly = c.MetadataOnly && metadataOnly
		default:
			problems = append(problems, fmt.Sprintf("attribute %s: set jsonPath or cel", a.Name))
			continue
		}
		c.attrs = append(c.attrs, attr)
	}
	if spec := p.Spec.FullObject; spec != nil {
		full, fullProblems := compileFullObject(p.Spec.Target, spec)
		problems = append(problems, fullProblems...)
		for _, a := range p.Spec.Attributes {
			if a.Name == full.attribute || a.Name == full.truncatedAttribute {
				problems = append(problems, fmt.Sprintf("attribute %s: the name is taken by fullObject (attribute %q)", a.Name, full.attribute))
			}
		}
		c.full, c.MetadataOnly = full, false
	}
	if len(p.Spec.Attributes) == 0 && p.Spec.FullObject == nil {
		problems = append(problems, "set attributes, fullObject or both")
	}
	if len(problems) > 0 {
		return nil, &CompileError{Problems: problems}
	}
	return c, nil
}

// compileDecode checks the profile's decoder against its kind (the CRD's validation says the
// same; this serves the CLI and objects admitted before it).
func (c *Compiled) compileDecode(spec *kollectv1.KollectProfileSpec) []string {
	if spec.Decode == "" {
		if spec.DecodeOptions != nil {
			return []string{"decodeOptions needs decode"}
		}
		return nil
	}
	if spec.Decode != kollectv1.DecodeHelmRelease {
		return []string{fmt.Sprintf("decode: unknown decoder %q (supported: %s)", spec.Decode, kollectv1.DecodeHelmRelease)}
	}
	if t := spec.Target; t.Group != "" || t.Version != "v1" || t.Kind != "Secret" {
		return []string{"decode HelmRelease reads Helm's release Secrets: set target to {version: v1, kind: Secret}"}
	}
	c.Decode, c.MetadataOnly = spec.Decode, false
	if o := spec.DecodeOptions; o != nil {
		switch o.Values {
		case "", kollectv1.ValuesOmit:
		case kollectv1.ValuesRedacted:
			c.DecodeValues = true
		default:
			return []string{fmt.Sprintf("decodeOptions.values: %q is not Omit or Redacted", o.Values)}
		}
	}
	return nil
}

// AttributeError is an extraction that failed on one attribute: an evaluation error or a failed
// coercion. Callers that count failures per attribute (bundle previews) read Attribute rather
// than parse the message, which stays "attribute <name>: <cause>".
type AttributeError struct {
	Attribute string
	Err       error
}

func (e *AttributeError) Error() string { return "attribute " + e.Attribute + ": " + e.Err.Error() }

// Unwrap lets errors.Is/As see the cause (IsCostLimitExceeded relies on it).
func (e *AttributeError) Unwrap() error { return e.Err }

// MissingError reports required attributes that an object lacks.
type MissingError struct{ Attributes []string }

func (e *MissingError) Error() string {
	return "missing required attribute(s) " + strings.Join(e.Attributes, ", ")
}

// Extract runs every attribute against obj (an unstructured object's content) and returns the
// values keyed by attribute name. A missing optional attribute is left out; a missing required
// one, an evaluation error or a failed coercion makes the whole extraction fail with an error
// naming the attribute, so the object is reported instead of exported with holes. With
// fullObject, an object cut to maxBytes returns its values and a *TruncatedError together.
func (c *Compiled) Extract(obj map[string]any) (map[string]any, error) {
	out, _, err := c.extract(obj)
	return out, err
}

// Attributes names the profile's attributes in declaration order, then fullObject's attribute
// when the profile exports the whole object.
func (c *Compiled) Attributes() []string {
	out := make([]string, 0, len(c.attrs)+1)
	for i := range c.attrs {
		out = append(out, c.attrs[i].name)
	}
	if c.full != nil {
		out = append(out, c.full.attribute)
	}
	return out
}

// JSONPathCost is what one JSONPath evaluation is charged against a profile's cost budget: it
// walks the object once, like a CEL field selection.
const JSONPathCost = 1

// extract is Extract that also returns what the evaluations cost, in CEL cost units (see
// expr.Budgeted.EvalCost), so the collector can hold each profile to its budget. Attributes
// after a failing one are not evaluated.
func (c *Compiled) extract(obj map[string]any) (map[string]any, uint64, error) {
	out := make(map[string]any, len(c.attrs))
	var missing []string
	var cost uint64
	for i := range c.attrs {
		a := &c.attrs[i]
		v, found, spent, err := a.eval(obj)
		cost += spent
		if err != nil {
			return nil, cost, &AttributeError{Attribute: a.name, Err: err}
		}
		if !found {
			if !a.optional {
				missing = append(missing, a.name)
			}
			continue
		}
		if v, err = coerce(v, a.typ); err != nil {
			return nil, cost, &AttributeError{Attribute: a.name, Err: err}
		}
		out[a.name] = v
	}
	if len(missing) > 0 {
		return nil, cost, &MissingError{Attributes: missing}
	}
	if c.full == nil {
		return out, cost, nil
	}
	cost += JSONPathCost
	obj, cut, err := c.full.export(obj)
	if err != nil {
		return nil, cost, fmt.Errorf("fullObject: %w", err)
	}
	out[c.full.attribute] = obj
	if len(cut) == 0 {
		return out, cost, nil
	}
	paths := make([]any, len(cut))
	for i, p := range cut {
		paths[i] = p
	}
	out[c.full.truncatedAttribute] = paths
	return out, cost, &TruncatedError{MaxBytes: c.full.maxBytes, Paths: cut}
}

// ExtractJSON is Extract followed by the canonical encoding rows carry.
func (c *Compiled) ExtractJSON(obj map[string]any) ([]byte, error) {
	raw, _, err := c.ExtractJSONCost(obj)
	return raw, err
}

// ExtractJSONCost is ExtractJSON that also returns what the evaluations cost, in CEL cost units.
// An error that is an evaluation cut off by the per-evaluation cost limit satisfies
// IsCostLimitExceeded. A *TruncatedError (IsTruncated) comes with the encoded row: the object
// is exported, cut.
func (c *Compiled) ExtractJSONCost(obj map[string]any) ([]byte, uint64, error) {
	values, cost, err := c.extract(obj)
	if err != nil && !IsTruncated(err) {
		return nil, cost, err
	}
	raw, encErr := export.EncodeAttributes(values)
	if encErr != nil {
		return nil, cost, encErr
	}
	return raw, cost, err
}

// IsCostLimitExceeded reports whether err is an evaluation cut off by the per-evaluation cost
// limit (expr.CostLimit).
func IsCostLimitExceeded(err error) bool { return expr.IsCostLimitExceeded(err) }

func (a *attribute) eval(obj map[string]any) (any, bool, uint64, error) {
	if a.path != nil {
		v, found, err := a.path.extract(obj)
		return v, found, JSONPathCost, err
	}
	return evalCEL(a.program, obj)
}

// objectActivation binds `object` without allocating a map per evaluation.
type objectActivation struct{ object map[string]any }

func (a *objectActivation) ResolveName(name string) (any, bool) {
	if name == "object" {
		return a.object, true
	}
	return nil, false
}

func (a *objectActivation) Parent() interpreter.Activation { return nil }

func evalCEL(b *expr.Budgeted, obj map[string]any) (any, bool, uint64, error) {
	val, details, err := b.Program.Eval(&objectActivation{object: obj})
	cost := b.EvalCost(details)
	if err != nil {
		// A field the object lacks is "missing", which the attribute's optional flag governs.
		if strings.Contains(err.Error(), "no such key") || strings.Contains(err.Error(), "no such field") {
			return nil, false, cost, nil
		}
		return nil, false, cost, fmt.Errorf("evaluating CEL: %w", err)
	}
	if types.IsUnknownOrError(val) {
		return nil, false, cost, fmt.Errorf("evaluating CEL: %v", val)
	}
	if opt, ok := val.(*types.Optional); ok {
		if !opt.HasValue() {
			return nil, false, cost, nil
		}
		val = opt.GetValue()
	}
	if val == types.NullValue {
		return nil, false, cost, nil
	}
	native, err := celToNative(val)
	return native, err == nil, cost, err
}

var jsonValueType = reflect.TypeFor[*structpb.Value]()

// celToNative turns a CEL value into the shapes unstructured objects use.
func celToNative(val ref.Val) (any, error) {
	switch v := val.Value().(type) {
	case string, bool, float64:
		return v, nil
	case int64:
		return v, nil
	case uint64:
		return int64(v), nil
	}
	pb, err := val.ConvertToNative(jsonValueType)
	if err != nil {
		return nil, fmt.Errorf("CEL result of type %s cannot be exported: %w", val.Type().TypeName(), err)
	}
	native := pb.(*structpb.Value).AsInterface()
	return normalizeNumbers(native), nil
}

// normalizeNumbers turns protobuf's float64-only numbers back into int64 where integral, so
// a list of integers stays a list of integers.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
	case []any:
		for i := range x {
			x[i] = normalizeNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalizeNumbers(x[k])
		}
	}
	return v
}

// EvalMatch runs a compiled target match expression; it must return a boolean.
func EvalMatch(m *Match, obj map[string]any) (bool, error) {
	ok, _, err := EvalMatchCost(m, obj)
	return ok, err
}

// EvalMatchCost is EvalMatch that also returns what the evaluation cost, in CEL cost units.
func EvalMatchCost(m *Match, obj map[string]any) (bool, uint64, error) {
	val, details, err := m.b.Program.Eval(&objectActivation{object: obj})
	cost := m.b.EvalCost(details)
	if err != nil {
		return false, cost, fmt.Errorf("evaluating match: %w", err)
	}
	b, ok := val.(types.Bool)
	if !ok {
		return false, cost, errors.New("match expression must return a boolean")
	}
	return bool(b), cost, nil
}
