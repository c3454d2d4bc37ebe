// Package apitest proves the kollect.dev/v1alpha1 CRDs against a real kube-apiserver: they
// install, the documented examples are accepted, invalid objects are refused with a clear
// message, and `kubectl get kollect` lists every kind.
package apitest
