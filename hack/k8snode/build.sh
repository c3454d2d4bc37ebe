#!/usr/bin/env bash
# Build the test node's Kubernetes binaries (kubelet, kube-scheduler, kube-controller-manager,
# kube-proxy) from this wrapper module into $1 (default ./bin/node-<ver>). GOWORK=off: this
# module is not part of the repository's go.work workspace. CGO off: the kubelet runs with
# containerd over CRI and needs none of cadvisor's cgo paths.
set -euo pipefail
cd "$(dirname "$0")"
export GOWORK=off CGO_ENABLED=0
K8S=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' go.mod | head -1)
OUT=${1:-bin/node-$K8S}
MINOR=$(echo "$K8S" | cut -d. -f2)
V=k8s.io/component-base/version
mkdir -p "$OUT"
go build -trimpath \
  -ldflags "-s -w -X $V.gitVersion=$K8S -X $V.gitMajor=1 -X $V.gitMinor=$MINOR -X $V.gitTreeState=clean" \
  -o "$OUT/" ./cmd/kubelet ./cmd/kube-scheduler ./cmd/kube-controller-manager ./cmd/kube-proxy
