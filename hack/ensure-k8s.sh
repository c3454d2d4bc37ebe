#!/usr/bin/env bash
# Builds etcd + kube-apiserver (and kubectl) from hack/k8sbin into a cache directory keyed by
# the pinned versions and a hash of the wrapper module, then prints that directory.
# A warm machine rebuilds nothing; an interrupted build never leaves a half-filled directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
mod=$here/k8sbin
k8s=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' "$mod/go.mod" | head -1)
etcd=$(sed -n 's/^[[:space:]]*go.etcd.io\/etcd\/server\/v3 \(v[^ ]*\).*/\1/p' "$mod/go.mod" | head -1)
hash=$(cd "$mod" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' -o -name '*.sh' \) | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)
out=$(kollect_cache)/k8s-$k8s-etcd-$etcd-$hash
if [ ! -x "$out/kube-apiserver" ] || [ ! -x "$out/etcd" ] || [ ! -x "$out/kubectl" ]; then
  echo "building kube-apiserver $k8s, etcd $etcd and kubectl into $out (cold: ~10 min)" >&2
  build_into "$out" control-plane "$mod/build.sh"
fi
echo "$out"
