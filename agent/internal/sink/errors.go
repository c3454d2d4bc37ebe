package sink

import (
	"errors"
	"fmt"

	"kollect.dev/api/v1alpha1"
)

// ErrorClass says whether retrying can help.
type ErrorClass string

// Error classes.
const (
	// Transient errors (network, timeouts, conflicts, throttling) are retried with backoff.
	Transient ErrorClass = v1alpha1.SinkErrorTransient
	// Terminal errors (bad credentials, missing bucket, invalid configuration) wait for a
	// change of configuration; retrying the same call cannot help.
	Terminal ErrorClass = v1alpha1.SinkErrorTerminal
	// CircuitOpen is not an error's class but a delivery worker's state, reported in the
	// error's place: transient errors kept failing, the breaker opened, and attempts now wait
	// at least the breaker's cooldown, one at a time.
	CircuitOpen ErrorClass = v1alpha1.SinkErrorCircuitOpen
)

type classified struct {
	class ErrorClass
	err   error
}

func (e *classified) Error() string { return e.err.Error() }
func (e *classified) Unwrap() error { return e.err }

// TransientError marks err as retryable.
func TransientError(err error) error {
	if err == nil {
		return nil
	}
	return &classified{Transient, err}
}

// TerminalError marks err as not retryable until the configuration changes.
func TerminalError(err error) error {
	if err == nil {
		return nil
	}
	return &classified{Terminal, err}
}

// Terminalf formats a terminal error.
func Terminalf(format string, args ...any) error { return TerminalError(fmt.Errorf(format, args...)) }

// ClassOf returns the class of err: a writer conflict is terminal, else the innermost
// classification wins; unclassified errors and context deadlines are transient.
func ClassOf(err error) ErrorClass {
	if errors.Is(err, ErrWriterConflict) {
		// Retrying cannot help while the other agent writes; the worker waits a confirm
		// interval between attempts.
		return Terminal
	}
	var c *classified
	if errors.As(err, &c) {
		return c.class
	}
	return Transient
}
