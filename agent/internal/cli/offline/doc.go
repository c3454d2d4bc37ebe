// Package offline runs Kollect profiles and targets outside the agent: it reads the Kollect
// objects of a set of manifests, compiles them with the agent's own code (profile compiler,
// collector selection) and turns objects into exactly the rows an inventory would export.
// `kollect render` feeds it objects from files, `kollect collect` objects listed from clusters.
package offline
