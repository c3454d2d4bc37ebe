// Package testenv starts real Kubernetes control planes (etcd + kube-apiserver through
// controller-runtime's envtest) for the tests of every Kollect module, with the Kollect CRDs
// installed. It is the project's single test harness: agent, hub and e2e tests share it.
//
// The binaries come from KUBEBUILDER_ASSETS, which `make test` points at a cache built from
// pinned Go modules (hack/ensure-k8s.sh). Missing binaries are an error, never a skip.
package testenv
