package expr

import (
	"fmt"
	"strings"
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
	prg, _, err := budgetedProgram(env, ast)
	return prg, err
}

// TrackThreshold is the estimated worst-case cost above which a program measures what each
// evaluation actually costs. Below it the estimate itself is charged: it is a sound upper bound
// (see objectSizes) and measuring costs allocations on every evaluation (about five times the
// time of a field read), which the expressions most profiles consist of do not deserve.
const TrackThreshold = 10_000

// budgetedProgram plans a program and says what one evaluation is charged against a cost
// budget: staticCost when it is not zero (the program does not track its cost), the actual
// cost the evaluation reports otherwise (see EvalCost).
func budgetedProgram(env *cel.Env, ast *cel.Ast) (prg cel.Program, staticCost uint64, err error) {
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	est, estErr := env.EstimateCost(ast, objectSizes{})
	if estErr != nil || est.Max > TrackThreshold {
		// The Kubernetes libraries' runtime costs (regex, lists, quantity, ...) count, as they
		// do in the API server; the budget is enforced on every evaluation.
		opts = append(opts, cel.CostTracking(&library.CostEstimator{}), cel.CostLimit(CostLimit))
	} else {
		staticCost = max(est.Max, 1)
	}
	prg, err = env.Program(ast, opts...)
	if err != nil {
		return nil, 0, fmt.Errorf("planning CEL program: %w", err)
	}
	return prg, staticCost, nil
}

// Budgeted is a compiled expression with what a cost budget needs to charge its evaluations.
type Budgeted struct {
	Program cel.Program
	// AST is the checked expression (see CELReadsOnlyMetadata).
	AST *cel.Ast
	// StaticCost is what every evaluation is charged when the program does not track its cost
	// (its estimated worst case, at most TrackThreshold); 0 when it tracks it.
	StaticCost uint64
}

// EvalCost is what an evaluation of b cost, in CEL cost units: its actual cost when tracked
// (CostLimit when it was cut off there), StaticCost otherwise.
func (b *Budgeted) EvalCost(details *cel.EvalDetails) uint64 {
	if b.StaticCost > 0 {
		return b.StaticCost
	}
	if details != nil {
		if c := details.ActualCost(); c != nil {
			return *c
		}
	}
	return CostLimit // cut off before it could report: it spent the budget
}

// IsCostLimitExceeded reports whether an evaluation error is the cost limit cutting it off.
func IsCostLimitExceeded(err error) bool {
	return err != nil && strings.Contains(err.Error(), "actual cost limit exceeded")
}

// CompileCELBudgeted is CompileCEL returning what a cost budget needs.
func CompileCELBudgeted(src string) (*Budgeted, error) {
	return compileBudgeted(src, false)
}

// CompileMatchBudgeted is CompileMatch returning what a cost budget needs.
func CompileMatchBudgeted(src string) (*Budgeted, error) {
	return compileBudgeted(src, true)
}

func compileBudgeted(src string, match bool) (*Budgeted, error) {
	env, ast, err := check(src)
	if err != nil {
		return nil, err
	}
	if match {
		if out := ast.OutputType(); !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
			return nil, &Error{Language: CEL, Reason: ReasonResultType, Detail: fmt.Sprintf("must return bool, not %s", out)}
		}
	}
	prg, static, err := budgetedProgram(env, ast)
	if err != nil {
		return nil, err
	}
	return &Budgeted{Program: prg, AST: ast, StaticCost: static}, nil
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
