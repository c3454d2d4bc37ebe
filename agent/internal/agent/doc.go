// Package agent assembles a Kollect agent: a controller-runtime manager with the collector,
// the inventory manager and the reconcilers. The kollect-agent binary, the demo and the
// end-to-end tests all build agents through the same wiring (New, Run).
//
// # Losing the lease without exiting
//
// controller-runtime ends a manager that loses its leader lease ("leader election lost"),
// and most operators then exit, as client-go advises: after a lost lease nothing may keep
// acting as leader, and ending everything is the simple way to be sure. Exiting made an API
// outage a crash loop, though: the restarted process could not reach the API server either
// (issue #18). Run keeps the guarantee without the exit. The process is a shell (metrics,
// probes, the webhook server and its certificates, the metric collectors: what must outlive
// a leader) around a sequence of terms; a term is a complete manager built by build, with
// its caches, collector, inventories, reconcilers and leader election. When a term loses
// the lease it ends whole, exactly as controller-runtime ends it; Run waits for its
// exporting runnables to return (controller-runtime skips the graceful shutdown on a lost
// lease), then starts the next term, which syncs its watches as a warm standby and
// campaigns again. Nothing of the old term's pipeline survives into the next, so no stale
// goroutine can export as a leader it no longer is; the price is a re-list of the watched
// objects per lost lease, which an outage long enough to lose the lease dwarfs.
//
// The alternatives were rejected: driving client-go's leaderelection around only the
// leader-only parts needs every component's "elected" gate to become revocable (today the
// inventories, reconcilers and the hub client wait once on a channel that closes once), and
// restarting a manager's runnables in place is not something controller-runtime supports.
//
// Every term campaigns under the process's one identity (leaseLock): after an outage that
// no other replica used, the next term finds its own name on the Lease and takes it back at
// once instead of waiting for it to expire.
package agent
