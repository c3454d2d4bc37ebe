// Package sinktest provides Recorder, a sink that records what it is asked to export, for the
// tests of the export pipeline itself (the real sinks are tested against real servers in their
// own packages). It can be told to fail or to hang, to exercise retries and deadlines.
package sinktest
