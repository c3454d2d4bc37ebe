// Package charts tests the Helm charts in charts/: helm lint, helm template for the default
// values and the combinations that matter, every rendered manifest validated by kubeconform
// against JSON schemas generated from a real kube-apiserver's OpenAPI (no network needed) and
// applied with server-side dry-run to that apiserver, the agent's RBAC checked by access reviews
// after a real install of its RBAC objects, every flag the charts pass checked against the
// commands, the generated chart files checked for staleness, and e2e/kind-fleet/run.sh checked
// by bash -n and shellcheck.
//
// The tools come from KOLLECT_TOOLS=$(hack/ensure-tools.sh) (helm, kubeconform, shellcheck; when
// unset, the tests run hack/ensure-tools.sh themselves) and the control plane from
// KUBEBUILDER_ASSETS=$(hack/ensure-k8s.sh); missing ones fail the tests, never skip them.
//
// Beyond rendering, the tests run the real kollect-agent with the agent chart's arguments as
// its ServiceAccount with only the chart's RBAC (standalone, then registered with a real hub
// that distributes a bundle), the real kollect-hub with the hub chart's arguments, and
// helm install/upgrade/uninstall against the test apiserver.
package charts
