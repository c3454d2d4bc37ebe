#!/usr/bin/env bash
# Packages both charts as the release publishes them: chart version VERSION (without its v),
# appVersion the image tag `make images` gives VERSION (so that the charts' default image is
# the one published), image.repository REGISTRY/agent and REGISTRY/hub.
# Usage: hack/charts-package.sh OUT VERSION [REGISTRY]   (REGISTRY default ghcr.io/kollect-dev)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=${1:?usage: charts-package.sh OUT VERSION [REGISTRY]}
version=${2:?usage: charts-package.sh OUT VERSION [REGISTRY]}
registry=${3:-ghcr.io/kollect-dev}
helm=$("$here/ensure-tools.sh")/helm
chart_version=${version#v}
app_version=${chart_version//+/-} # the image tag: no "+" in a tag
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
for chart in agent hub; do
  cp -r "$root/charts/$chart" "$work/$chart"
  # Point the packaged chart's default image at REGISTRY; nothing else in values.yaml changes.
  sed -i "s#^\(  repository: \)ghcr.io/kollect-dev/$chart\$#\1$registry/$chart#" "$work/$chart/values.yaml"
  grep -q "^  repository: $registry/$chart\$" "$work/$chart/values.yaml" ||
    { echo "charts/$chart/values.yaml: image.repository not found" >&2; exit 1; }
  "$helm" package "$work/$chart" --version "$chart_version" --app-version "$app_version" -d "$out" >&2
done
ls "$out"/*.tgz
