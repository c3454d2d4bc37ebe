// Command kubectl is kubectl built at the same version as the test apiserver (the Debian
// kubectl on these machines is outside the supported version skew).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		os.Exit(1)
	}
}
