// Package apiserver is the end-to-end test of kollect-agent, as shipped, through API server
// outages with leader election on: the binary built as `make build` builds it, run as
// processes against a real kube-apiserver and etcd (testenv) whose apiserver the test freezes
// with SIGSTOP for 60 s and resumes with SIGCONT. It checks what issue #18 asked of the
// agent: no process exits, every row exported after the outage, the first export after the
// API's return within 10 s, exactly one exporting leader among two replicas, and a standby
// that takes over a leader killed with SIGKILL within 10 s with the default lease flags. The
// figures are logged in lines starting "figure:" (see docs/operations.md).
package apiserver
