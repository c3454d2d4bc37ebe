package profile

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	kollectv1 "kollect.dev/api/v1alpha1"
)

// coerce converts an extracted value to the attribute's declared type. Values come from
// unstructured objects (string, int64, float64, bool, []any, map[string]any, nil) or from CEL
// (converted to the same shapes by celToNative).
func coerce(v any, t kollectv1.AttributeType) (any, error) {
	switch t {
	case kollectv1.AttributeString, "":
		return toString(v)
	case kollectv1.AttributeInt:
		return toInt(v)
	case kollectv1.AttributeFloat:
		return toFloat(v)
	case kollectv1.AttributeBool:
		return toBool(v)
	case kollectv1.AttributeList:
		if l, ok := v.([]any); ok {
			return l, nil
		}
		return []any{v}, nil
	case kollectv1.AttributeMap:
		if m, ok := v.(map[string]any); ok {
			return m, nil
		}
		return nil, &CoercionError{Want: "a map", Got: describe(v)}
	case kollectv1.AttributeObject:
		return v, nil
	}
	return nil, fmt.Errorf("unknown attribute type %q", t)
}

// CoercionError is an extracted value that does not convert to its attribute's type. It says
// what was wanted and what kind of value was found, never the value: the message reaches
// conditions, logs and the answers to bundle previews (which go to the hub), and an object's
// values are for its sinks only.
type CoercionError struct{ Want, Got string }

func (e *CoercionError) Error() string { return "want " + e.Want + ", got " + e.Got }

// notOne is what a string that does not parse as the wanted type is called.
const notOne = "a string that is not one"

func toString(v any) (any, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case json.Number:
		return x.String(), nil
	case []any:
		// A one-element list from [*] is the common case of a "string" path hitting a list.
		if len(x) == 1 {
			return toString(x[0])
		}
	}
	return nil, &CoercionError{Want: "a string", Got: describe(v)}
}

func toInt(v any) (any, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), nil
		}
		return nil, &CoercionError{Want: "an integer", Got: "a number with a fraction or out of range"}
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return nil, &CoercionError{Want: "an integer", Got: notOne}
		}
		return n, nil
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			return nil, &CoercionError{Want: "an integer", Got: "a number with a fraction or out of range"}
		}
		return n, nil
	}
	return nil, &CoercionError{Want: "an integer", Got: describe(v)}
}

func toFloat(v any) (any, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64:
		return float64(x), nil
	case int:
		return float64(x), nil
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return nil, &CoercionError{Want: "a number", Got: notOne}
		}
		return f, nil
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return nil, &CoercionError{Want: "a number", Got: "a number out of range"}
		}
		return f, nil
	}
	return nil, &CoercionError{Want: "a number", Got: describe(v)}
}

func toBool(v any) (any, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		b, err := strconv.ParseBool(x)
		if err != nil {
			return nil, &CoercionError{Want: "a boolean", Got: notOne}
		}
		return b, nil
	}
	return nil, &CoercionError{Want: "a boolean", Got: describe(v)}
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, int, float64, json.Number:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
