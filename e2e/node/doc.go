// Package node runs the product as users install it: the images of `make images` on a real
// Kubernetes node (kubelet, containerd and runc, kube-proxy, scheduler and controller-manager,
// started by testenv.StartNodeCluster), installed with the real `helm` from charts/. Everything
// a loose process cannot show is exercised here: the kubelet's probes decide readiness, the
// charts' security context (non-root, read-only root filesystem, no capabilities) holds against
// what the binaries write, the API server reaches the agent's webhook through its Service, two
// agent replicas share a Lease, GOMEMLIMIT comes from the memory limit, and `helm upgrade` and
// `helm uninstall` do what the docs say.
//
// The rows are read back with psql from a PostgreSQL on the host's side of the node's network;
// the hub is reached with curl. The node's network is a namespace of its own: nothing leaves
// the machine.
package node
