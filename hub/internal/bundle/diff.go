package bundle

import (
	"fmt"

	"github.com/pmezard/go-difflib/difflib"
)

// Diff returns a unified diff (3 lines of context) from one revision's manifests to another's;
// empty when they are equal.
func Diff(bundle string, fromRev, toRev int64, from, to string) (string, error) {
	if from == to {
		return "", nil
	}
	out, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A:        difflib.SplitLines(from),
		B:        difflib.SplitLines(to),
		FromFile: fmt.Sprintf("%s@%d", bundle, fromRev),
		ToFile:   fmt.Sprintf("%s@%d", bundle, toRev),
		Context:  3,
	})
	if err != nil {
		return "", fmt.Errorf("diffing %s@%d..%d: %w", bundle, fromRev, toRev, err)
	}
	return out, nil
}
