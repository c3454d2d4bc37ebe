#!/usr/bin/env bash
# Makes a Kubernetes node possible on this machine and prints the directory of its binaries:
#  - the Debian packages a node runs on: containerd and runc (the container runtime), the CNI
#    plugins (the pods' bridge network), iptables and conntrack (kube-proxy), iproute2 (the
#    node's network namespace);
#  - kubelet, kube-scheduler, kube-controller-manager and kube-proxy built from hack/k8snode,
#    which pins the same k8s.io/kubernetes as the control plane of hack/k8sbin, into a cache
#    directory keyed by that version and a hash of the wrapper module.
# testenv finds the binaries through KOLLECT_NODE=$(hack/ensure-node.sh). A warm machine builds
# nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
"$here/ensure-packages.sh" node
mod=$here/k8snode
k8s=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' "$mod/go.mod" | head -1)
cp=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' "$here/k8sbin/go.mod" | head -1)
if [ "$k8s" != "$cp" ]; then
  echo "hack/k8snode pins k8s.io/kubernetes $k8s but the control plane (hack/k8sbin) $cp:" \
    "run hack/k8snode/gen-go-mod.sh $cp" >&2
  exit 1
fi
hash=$(cd "$mod" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' -o -name '*.sh' \) | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)
out=$(kollect_cache)/node-$k8s-$hash
if [ ! -x "$out/kubelet" ] || [ ! -x "$out/kube-scheduler" ] || [ ! -x "$out/kube-controller-manager" ] || [ ! -x "$out/kube-proxy" ]; then
  echo "building kubelet, kube-scheduler, kube-controller-manager and kube-proxy $k8s into $out (cold: ~20 min)" >&2
  build_into "$out" node "$mod/build.sh"
fi
echo "$out"
