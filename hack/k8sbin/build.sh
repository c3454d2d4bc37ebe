#!/usr/bin/env bash
# Build etcd + kube-apiserver + kubectl from this wrapper module into $1 (default ./bin/k8s-<ver>).
# GOWORK=off: this module is not part of the repository's go.work workspace, and inside it
# `go build` refuses its packages ("not one of the workspace modules").
set -euo pipefail
cd "$(dirname "$0")"
export GOWORK=off
K8S=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' go.mod | head -1)
OUT=${1:-bin/k8s-$K8S}
MINOR=$(echo "$K8S" | cut -d. -f2)
V=k8s.io/component-base/version
mkdir -p "$OUT"
go build -trimpath \
  -ldflags "-s -w -X $V.gitVersion=$K8S -X $V.gitMajor=1 -X $V.gitMinor=$MINOR -X $V.gitTreeState=clean" \
  -o "$OUT/" ./cmd/etcd ./cmd/kube-apiserver ./cmd/kubectl
