// Command pause holds a pod's namespaces for the test node's containerd, as the upstream pause
// container does: it sleeps until SIGINT or SIGTERM. testenv builds it and packs it into the
// node's sandbox image (nothing can be pulled here).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}
