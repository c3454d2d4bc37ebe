// Package collector keeps one watch per GroupVersionKind, shared by every target that selects
// that kind, and stores for each object only what the targets need: its identity, the rows its
// profiles extracted and the results of client-side selection. Objects are projected in the
// informer's transform, before they reach the store, so memory follows the size of the
// extracted attributes and never the size of the objects.
//
// Watches start when the first target of a kind appears and stop with the last one; a change
// of what a kind's targets need (a new target, a new profile generation, another CEL match)
// restarts that kind's watch with the new projection, which lists the kind again. Restarts are
// coalesced (CoalesceOptions): a burst of target changes, such as every tenant's target at
// start-up, restarts a kind's watch once. Label and field selectors go to the API server when
// every target of the kind agrees on them; a target that names its namespaces is collected
// from a namespace index of the watch's items.
package collector
