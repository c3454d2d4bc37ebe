package expr

import "errors"

// Language names an expression language.
type Language string

// The languages of Kollect expressions.
const (
	CEL              Language = "CEL"
	JSONPathLanguage Language = "JSONPath"
)

// Reason says why an expression is refused.
type Reason string

const (
	// ReasonCompile: the expression does not parse or does not type-check.
	ReasonCompile Reason = "Compile"
	// ReasonResultType: a match expression does not return a boolean.
	ReasonResultType Reason = "ResultType"
	// ReasonCost: the expression exceeds the cost budget on every object.
	ReasonCost Reason = "Cost"
)

// Error is an expression the environment refuses. Detail is the compiler's or parser's own
// message (with <input>:line:column for CEL); Error() prefixes it with what went wrong.
// Callers that already name the language in their message use Detail.
type Error struct {
	Language Language
	Reason   Reason
	Detail   string
}

func (e *Error) Error() string {
	switch {
	case e.Language == JSONPathLanguage:
		return "JSONPath parse error: " + e.Detail
	case e.Reason == ReasonResultType:
		return "CEL match " + e.Detail
	case e.Reason == ReasonCost:
		return "CEL cost error: " + e.Detail
	default:
		return "CEL compile error: " + e.Detail
	}
}

// Detail returns the Detail of an *Error in err's chain, or err's message.
func Detail(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Detail
	}
	return err.Error()
}
