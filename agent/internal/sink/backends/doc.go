// Package backends is the one table of every sink backend built into the agent, keyed
// "family/type" (sink.Key). It is the only place that lists them: the agent's
// reconcilers build sinks through the table they are given and know no backend by name.
//
// A test reads the spec.type enums of the three sink CRDs (api/crds) and fails when a type the
// API accepts has no backend here, or a backend here has no type in the API; another reads
// the wing's imports and fails when a backend reaches beyond the contract and shared helpers.
package backends
