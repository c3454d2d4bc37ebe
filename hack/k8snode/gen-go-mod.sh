#!/usr/bin/env bash
# Regenerate go.mod/go.sum of the node-binaries wrapper module (kubelet, kube-scheduler,
# kube-controller-manager, kube-proxy) for a given Kubernetes version. Usage: ./gen-go-mod.sh v1.37.2 (the version of hack/k8sbin)
set -euo pipefail
K8S=${1:?kubernetes version, e.g. v1.37.2}
STAGING="v0.${K8S#v1.}"            # v1.37.2 -> v0.37.2 (staging modules are tagged this way)
cd "$(dirname "$0")"
export GOWORK=off # not a workspace module
# k8s.io/kubernetes' own go.mod lists its staging modules as "k8s.io/X v0.0.0"
# and replaces them with ./staging/...; we replace them with published versions.
KMOD=$(go mod download -json "k8s.io/kubernetes@$K8S" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
{
  echo "module kollect.dev/hack/k8snode"
  echo
  echo "go 1.26.0"
  echo
  echo "require ("
  printf '\tk8s.io/kubernetes %s\n' "$K8S"
  echo ")"
  echo
  echo "replace ("
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) v0\.0\.0$#\1#p' "$KMOD" |
    while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$STAGING"; done
  echo ")"
} > go.mod
rm -f go.sum
go mod tidy
