package profile

import (
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/ext"
	"k8s.io/apiserver/pkg/cel/library"
)

// CostLimit bounds the work one CEL evaluation may do (the same unit as the Kubernetes API
// server's per-expression budget). An expression that exceeds it fails for that object only.
const CostLimit = 1_000_000

var (
	envOnce sync.Once
	baseEnv *cel.Env
	envErr  error
)

// Env returns the shared CEL environment: the variable `object` (any JSON value), the
// Kubernetes libraries (lists, regex, urls, quantity, ip, cidr) and the strings extension.
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

// CompileCEL compiles expr into a program with the cost budget. The error carries the
// compiler's message with line and column.
func CompileCEL(expr string) (cel.Program, error) {
	env, err := Env()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%s", iss.Err())
	}
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
