// Package rollout is the hub's staged-rollout engine: it moves the clusters of a bundle from
// one revision to another wave by wave, checking health gates on every moved cluster.
//
// The package has two halves. Plan, Evaluate and Advance are pure functions (no I/O, the
// clock passed in) that plan waves, judge one cluster's gates from its last heartbeat and
// compute the next step of a rollout; they carry the semantics of rollout.proto and are
// unit-tested directly. Engine does the I/O: its Run loop reads every active rollout from the
// store about once a second (sooner when woken by a heartbeat), asks Advance for the next step
// and writes it with store.ApplyRolloutStep, whose compare-and-swap lets every hub replica run
// the loop safely. All state is in the store, so a restarted hub resumes where it was.
package rollout
