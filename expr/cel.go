package expr

import (
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/ext"
	"k8s.io/apiserver/pkg/cel/library"
)

// CostLimit bounds the work one CEL evaluation may do (the same unit as the Kubernetes API
// server's per-expression budget). An expression that exceeds it at run time fails for that
// object only; one that exceeds it on every object is refused when it is compiled.
const CostLimit = 1_000_000

var (
	envOnce sync.Once
	baseEnv *cel.Env
	envErr  error
)

// Env returns the shared CEL environment: the variable `object` (any JSON value), optional
// types, homogeneous aggregate literals, the Kubernetes libraries (lists, regex, urls,
// quantity, ip, cidr) and the strings extension. It is built once and safe for concurrent use.
func Env() (*cel.Env, error) {
	envOnce.Do(func() {
		baseEnv, envErr = cel.NewEnv(
			cel.Variable("object", cel.DynType),
			cel.OptionalTypes(),
			cel.HomogeneousAggregateLiterals(),
			library.Lists(), library.Regex(), library.URLs(), library.Quantity(), library.IP(), library.CIDR(),
			ext.Strings(ext.StringsVersion(2)),
		)
		if envErr != nil {
			envErr = fmt.Errorf("building the CEL environment: %w", envErr)
		}
	})
	return baseEnv, envErr
}

// CompileCEL compiles an attribute expression into a program under the cost budget. A
// syntax or type error, or an expression whose estimated cost exceeds the budget on every
// object, is an *Error; any other error is the environment's own failure.
func CompileCEL(src string) (cel.Program, error) {
	env, ast, err := check(src)
	if err != nil {
		return nil, err
	}
	return program(env, ast)
}

// CompileMatch compiles a target match expression, which must return a boolean. `object` is
// dynamic, so an expression whose type is only known at run time (dyn) is accepted here and
// checked on evaluation.
func CompileMatch(src string) (cel.Program, error) {
	env, ast, err := check(src)
	if err != nil {
		return nil, err
	}
	if out := ast.OutputType(); !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
		return nil, &Error{Language: CEL, Reason: ReasonResultType, Detail: fmt.Sprintf("must return bool, not %s", out)}
	}
	return program(env, ast)
}

// check parses and type-checks src and refuses it when it can never fit the cost budget.
func check(src string) (*cel.Env, *cel.Ast, error) {
	env, err := Env()
	if err != nil {
		return nil, nil, err
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, nil, &Error{Language: CEL, Reason: ReasonCompile, Detail: iss.Err().Error()}
	}
	// The estimate's minimum assumes every value read from the object is empty; when even
	// that exceeds the budget, every evaluation would fail, so the expression is refused now
	// rather than reported on every object later.
	if est, err := env.EstimateCost(ast, objectSizes{}); err == nil && est.Min > CostLimit {
		return nil, nil, &Error{Language: CEL, Reason: ReasonCost,
			Detail: fmt.Sprintf("estimated cost of at least %d exceeds the budget of %d on every object", est.Min, CostLimit)}
	}
	return env, ast, nil
}

func program(env *cel.Env, ast *cel.Ast) (cel.Program, error) {
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	// Runtime cost tracking costs allocations on every evaluation. When the static estimate
	// already proves the expression stays within the budget (no comprehension over data of
	// unknown size), the tracking is left out; otherwise the budget is enforced at run time.
	if est, err := env.EstimateCost(ast, objectSizes{}); err != nil || est.Max > CostLimit {
		opts = append(opts, cel.CostLimit(CostLimit))
	}
	prg, err := env.Program(ast, opts...)
	if err != nil {
		return nil, fmt.Errorf("planning CEL program: %w", err)
	}
	return prg, nil
}

// objectSizes bounds the size of any value read from an object by the largest request the
// API server accepts (3 MiB): a string, list or map of an object is never larger.
// Estimates built on it are sound, so an expression whose maximum fits the budget cannot
// exceed it at run time.
type objectSizes struct{}

const maxObjectSize = 3 << 20

func (objectSizes) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: maxObjectSize}
}

func (objectSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}
