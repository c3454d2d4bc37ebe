package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"kollect.dev/api/version"
)

func newVersionCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the kollect version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(env.Out, "kollect %s %s %s/%s\n", version.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
