// Package sinks registers every sink backend the agent is built with, keyed by family and
// type, so the controllers build sinks without knowing the backends.
package sinks
