// Package fleet runs the fleet scenario end to end on local control planes: a real kollect-hub
// and one real kollect-agent per cluster, registered with a bootstrap token, receiving a
// bundle over Connect RPC and exporting rows labelled with their cluster to one shared git
// repository. TestRollouts moves a bundle through staged rollouts on such a fleet (waves, gates,
// approval, rollback, a hub restart, an offline agent), partly with the kollect CLI.
// e2e/kind-fleet runs the same scenario on kind clusters where Docker exists.
package fleet
