package profile

import (
	"github.com/google/cel-go/cel"

	"kollect.dev/expr"
)

// CompileCEL compiles an attribute expression in the shared environment (kollect.dev/expr,
// the one the hub checks bundles with). The error carries the compiler's message with line
// and column.
func CompileCEL(src string) (cel.Program, error) {
	prg, err := expr.CompileCEL(src)
	if err != nil {
		return nil, &detailError{err: err}
	}
	return prg, nil
}

// compileAttributeCEL is CompileCEL that also says whether the checked expression provably
// reads only object.metadata (expr.CELReadsOnlyMetadata), which allows a metadata-only watch,
// and keeps what the cost budget charges its evaluations.
func compileAttributeCEL(src string) (*expr.Budgeted, bool, error) {
	b, err := expr.CompileCELBudgeted(src)
	if err != nil {
		return nil, false, &detailError{err: err}
	}
	return b, expr.CELReadsOnlyMetadata(b.AST), nil
}

// Match is a compiled target match expression.
type Match struct{ b *expr.Budgeted }

// CompileMatch compiles a target match expression, which must return a boolean (or dyn,
// checked by EvalMatch on every evaluation).
func CompileMatch(src string) (*Match, error) {
	b, err := expr.CompileMatchBudgeted(src)
	if err != nil {
		return nil, &detailError{err: err}
	}
	return &Match{b: b}, nil
}

// detailError keeps the agent's messages as they were ("attribute x: CEL: <compiler
// message>"): its callers name the language, so it shows only the compiler's own words. The
// *expr.Error stays in the chain for errors.As.
type detailError struct{ err error }

func (d *detailError) Error() string { return expr.Detail(d.err) }
func (d *detailError) Unwrap() error { return d.err }
