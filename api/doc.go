// Package api is the root of the kollect.dev/api module: the Kubernetes API types of Kollect
// (package v1alpha1), their generated CustomResourceDefinitions (package crds) and the sample
// objects that tests and documentation share (package samples).
package api
