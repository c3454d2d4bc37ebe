#!/usr/bin/env bash
# Builds the chart-test and release-lint tools (helm, kubeconform, actionlint) from the `tool` directives of hack/tools/go.mod
# into a cache directory keyed by their versions and a hash of go.mod/go.sum, links shellcheck
# (a Debian package, installed when missing) beside them, and prints that directory. The chart
# tests find the tools through KOLLECT_TOOLS=$(hack/ensure-tools.sh); a warm machine builds nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
mod=$here/tools
ver() { sed -n "s|^[[:space:]]*$1 \(v[^ ]*\).*|\1|p" "$mod/go.mod" | head -1; }
helm=$(ver 'helm.sh/helm/v3')
kubeconform=$(ver 'github.com/yannh/kubeconform')
actionlint=$(ver 'github.com/rhysd/actionlint')
if [ -z "$helm" ] || [ -z "$kubeconform" ] || [ -z "$actionlint" ]; then
  echo "hack/tools/go.mod lacks helm.sh/helm/v3, github.com/yannh/kubeconform or github.com/rhysd/actionlint" >&2
  exit 1
fi
hash=$(cat "$mod/go.mod" "$mod/go.sum" "$mod/build.sh" "$0" | sha256sum | cut -c1-12)
out=$(kollect_cache)/tools-helm-$helm-kubeconform-$kubeconform-actionlint-$actionlint-$hash
if [ ! -x "$out/helm" ] || [ ! -x "$out/kubeconform" ] || [ ! -x "$out/actionlint" ]; then
  echo "building helm $helm, kubeconform $kubeconform and actionlint $actionlint into $out (cold: a few minutes)" >&2
  build_into "$out" tools "$mod/build.sh" helm.sh/helm/v3/cmd/helm github.com/yannh/kubeconform/cmd/kubeconform \
    github.com/rhysd/actionlint/cmd/actionlint
fi
# shellcheck checks e2e/kind-fleet/run.sh in the chart tests, and actionlint runs it on the
# workflows' scripts; it is a Debian package, not a Go module.
"$here/ensure-packages.sh" tools
ln -sf "$(command -v shellcheck)" "$out/shellcheck"
echo "$out"
