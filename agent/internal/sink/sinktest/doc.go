// Package sinktest holds test helpers for the delivery pipeline and the sinks: Recorder, a sink
// that records what it is asked to export (it can be told to fail or to hang, to exercise
// retries and deadlines); Exporter, which drives a sink the way the agent does; and Deployment
// rows to export. The real sinks are tested against real servers in their own packages.
package sinktest
