// Package testenv starts real Kubernetes control planes (etcd + kube-apiserver through
// controller-runtime's envtest) for the tests of every Kollect module, with the Kollect CRDs
// installed, and the sink servers on 127.0.0.1. It is the project's single test harness: agent,
// hub and e2e tests share it; it is a module of its own so that no module's requirements
// name "e2e", and no shipped binary links it.
//
// For what only a pod has, StartNodeCluster starts a cluster with a real node: its own control
// plane and PKI, and a kubelet, kube-proxy and containerd in a network namespace of their own,
// into which the images of `make images` (Images) are imported.
//
// The binaries come from KUBEBUILDER_ASSETS, which `make test` points at a cache built from
// pinned Go modules (hack/ensure-k8s.sh), and KOLLECT_NODE (hack/ensure-node.sh). Missing
// binaries are an error, never a skip.
package testenv
