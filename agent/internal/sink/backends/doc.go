// Package backends is the one table of every sink backend built into the agent, keyed
// "family/type" (sink.Key). It is the only place that lists them: the agent's
// reconcilers build sinks through the table they are given and know no backend by name.
package backends
