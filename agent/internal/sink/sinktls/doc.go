// Package sinktls builds the client TLS configuration of a sink from its v1alpha1.TLSConfig:
// a custom CA (added to the system pool) and a client certificate, both read from Secrets in
// the sink's namespace. Sinks whose client library takes a *tls.Config share it.
package sinktls
