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
// reads only object.metadata (expr.CELReadsOnlyMetadata), which allows a metadata-only watch.
func compileAttributeCEL(src string) (cel.Program, bool, error) {
	prg, ast, err := expr.CompileCELChecked(src)
	if err != nil {
		return nil, false, &detailError{err: err}
	}
	return prg, expr.CELReadsOnlyMetadata(ast), nil
}

// CompileMatch compiles a target match expression, which must return a boolean (or dyn,
// checked by EvalMatch on every evaluation).
func CompileMatch(src string) (cel.Program, error) {
	prg, err := expr.CompileMatch(src)
	if err != nil {
		return nil, &detailError{err: err}
	}
	return prg, nil
}

// detailError keeps the agent's messages as they were ("attribute x: CEL: <compiler
// message>"): its callers name the language, so it shows only the compiler's own words. The
// *expr.Error stays in the chain for errors.As.
type detailError struct{ err error }

func (d *detailError) Error() string { return expr.Detail(d.err) }
func (d *detailError) Unwrap() error { return d.err }
