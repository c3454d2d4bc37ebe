package preview

import (
	"errors"
	"strings"
	"testing"

	"kollect.dev/agent/internal/profile"
)

// TestErrorClassQuotesNoValue: whatever an expression's error says (CEL and JSONPath quote
// the object's data), a preview's error sample names the attribute and the class of failure
// only; coercions and missing attributes keep their value-free messages.
func TestErrorClassQuotesNoValue(t *testing.T) {
	const planted = "s3cr3t-planted-value"
	for _, c := range []struct {
		err  error
		want string
	}{
		{&profile.AttributeError{Attribute: "team", Err: errors.New("no such key: " + planted)}, "attribute team: the expression failed on this object"},
		{&profile.AttributeError{Attribute: "size", Err: &profile.CoercionError{Want: "an integer", Got: "a string that is not one"}}, "attribute size: want an integer, got a string that is not one"},
		{&profile.MissingError{Attributes: []string{"owner"}}, "missing required attribute(s) owner"},
		{errors.New("release " + planted + " does not decode"), "the extraction failed"},
	} {
		got := errorClass(c.err)
		if got != c.want || strings.Contains(got, planted) {
			t.Errorf("errorClass(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
