package sink

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorClasses(t *testing.T) {
	base := errors.New("boom")
	if ClassOf(base) != Transient {
		t.Error("unclassified errors must be transient")
	}
	if ClassOf(fmt.Errorf("export: %w", TerminalError(base))) != Terminal {
		t.Error("wrapped terminal error lost its class")
	}
	if !errors.Is(TransientError(base), base) {
		t.Error("classification hides the cause")
	}
}
