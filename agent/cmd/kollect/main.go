// Command kollect validates Kollect manifests, renders rows from files and collects rows from
// clusters without an operator. The commands live in kollect.dev/agent/internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"

	"kollect.dev/agent/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli.Main(ctx, os.Args[1:], cli.StdEnv())
	stop()
	os.Exit(code)
}
