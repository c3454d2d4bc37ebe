package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/spf13/cobra"
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

// findings ends with exit code 1; the findings were printed already.
func findings(format string, args ...any) error {
	return &ExitError{Code: ExitFindings, Err: fmt.Errorf(format, args...)}
}

// usage ends with exit code 2.
func usage(err error) error { return &ExitError{Code: ExitUsage, Err: err} }

// Env is what commands read and write.
type Env struct {
	In       io.Reader
	Out, Err io.Writer
	// Terminal is true when Err is a terminal: progress lines are drawn only then.
	Terminal bool
	// OutWidth is the width of Out in columns when Out is a terminal, 0 otherwise: live
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

// outWidth is Out's terminal width, 0 when Out is not a terminal.
func (e *Env) outWidth() int {
	if e.OutWidth == nil {
		return 0
	}
	return e.OutWidth()
}

// command is a subcommand constructor; order sets the position in help output.
type command struct {
	order int
	build func(*Env) *cobra.Command
}

var commands []command

// register adds a subcommand; call it from an init function of the command's file.
func register(order int, build func(*Env) *cobra.Command) {
	commands = append(commands, command{order: order, build: build})
}

// NewRoot builds the kollect command with every registered subcommand.
func NewRoot(env *Env) *cobra.Command {
	root := &cobra.Command{
		Use:   "kollect",
		Short: "Try, check and run Kollect inventories without an operator",
		Long: "kollect validates Kollect manifests offline, renders the rows profiles and targets would export " +
			"from objects in files, and collects rows from clusters in one shot.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(env.In)
	root.SetOut(env.Out)
	root.SetErr(env.Err)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usage(fmt.Errorf("%w\nSee '%s --help'", err, c.CommandPath()))
	})
	sort.SliceStable(commands, func(i, j int) bool { return commands[i].order < commands[j].order })
	for _, c := range commands {
		root.AddCommand(c.build(env))
	}
	return root
}

// Main runs kollect with args and returns the exit code.
func Main(ctx context.Context, args []string, env *Env) int {
	root := NewRoot(env)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(env.Err, "kollect:", ee.Err)
		}
		return ee.Code
	}
	// Unknown commands, bad arguments and everything unexpected.
	fmt.Fprintln(env.Err, "kollect:", err)
	return ExitUsage
}
