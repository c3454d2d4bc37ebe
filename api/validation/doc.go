// Package validation holds checks of Kollect objects that the CRD schemas cannot express and
// that both the agent (its admission webhook, and before building a sink) and the hub (before
// storing a bundle) run, so that the two refuse the same objects with the same words.
package validation
