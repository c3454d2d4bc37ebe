// Package offline runs Kollect profiles and targets outside the agent's watches: it reads the
// Kollect objects of a set of manifests, compiles them with the agent's own code (profile
// compiler, collector selection) and turns objects into exactly the rows an inventory would
// export. A Stream takes the objects a page at a time (ListPages, Stream.List), so that no
// caller holds a whole kind: `kollect render` feeds it objects from files, `kollect collect`
// objects listed from clusters, and the agent's bundle previews (package preview) what the
// agent's own cluster holds.
package offline
