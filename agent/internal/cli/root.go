package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"kollect.dev/agent/internal/cli/cmdutil"
	"kollect.dev/agent/internal/cli/hubcmd"
)

// Env is what commands read and write (see cmdutil).
type Env = cmdutil.Env

// Exit codes of kollect (see cmdutil).
const (
	ExitOK       = cmdutil.ExitOK
	ExitFindings = cmdutil.ExitFindings
	ExitUsage    = cmdutil.ExitUsage
)

// StdEnv uses the process's standard streams.
func StdEnv() *Env { return cmdutil.StdEnv() }

func findings(format string, args ...any) error { return cmdutil.Findings(format, args...) }

func usage(err error) error { return cmdutil.Usage(err) }

// NewRoot builds the kollect command. The subcommands are listed here, in the order help
// shows them: first the offline ones (no cluster or hub needed), then those that read a
// cluster or a sink, then the hub's, then version.
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
	root.AddCommand(
		newValidateCmd(env),
		newRenderCmd(env),
		newCollectCmd(env),
		newQueryCmd(env),
		newSinksCmd(env),
		hubcmd.New(env),
		newVersionCmd(env),
	)
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
	var ee *cmdutil.ExitError
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
