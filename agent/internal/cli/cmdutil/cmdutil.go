package cmdutil

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// Exit codes.
const (
	ExitOK       = 0
	ExitFindings = 1
	ExitUsage    = 2
)

// ExitError ends the command with Code after printing Err (when set).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Findings ends the command with exit code 1; the findings were printed already.
func Findings(format string, args ...any) error {
	return &ExitError{Code: ExitFindings, Err: fmt.Errorf(format, args...)}
}

// Usage ends the command with exit code 2.
func Usage(err error) error { return &ExitError{Code: ExitUsage, Err: err} }

// Env is what commands read and write.
type Env struct {
	In       io.Reader
	Out, Err io.Writer
	// Terminal is true when Err is a terminal: progress lines are drawn only then.
	Terminal bool
	// OutWidth is the width of Out in columns when Out is a terminal, nil otherwise: live
	// displays redraw in place only on a terminal and append plain lines elsewhere.
	OutWidth func() int
}

// StdEnv uses the process's standard streams.
func StdEnv() *Env {
	env := &Env{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Terminal: term.IsTerminal(int(os.Stderr.Fd()))}
	if fd := int(os.Stdout.Fd()); term.IsTerminal(fd) {
		env.OutWidth = func() int {
			if w, _, err := term.GetSize(fd); err == nil && w > 0 {
				return w
			}
			return 80
		}
	}
	return env
}

// Width is Out's terminal width, 0 when Out is not a terminal.
func (e *Env) Width() int {
	if e.OutWidth == nil {
		return 0
	}
	return e.OutWidth()
}
