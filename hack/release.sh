#!/usr/bin/env bash
# The steps of the release pipeline (.github/workflows/release.yml), runnable here too:
#   hack/release.sh build REGISTRY VERSION   images for linux/amd64+arm64 into bin/release/images
#                                            and both charts, version VERSION, into bin/release/charts
#   hack/release.sh push-images [OUT]        push the built image indexes (docker config's login)
#   hack/release.sh push-charts REGISTRY     helm push both charts to oci://REGISTRY/charts
# OUT defaults to bin/release. `make test` runs `build` (e2e/images) and lints the workflow.
# An air-gapped user runs `build` with their own registry, then `push-images` and `push-charts`
# against it (docs/getting-started.md §2).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=${RELEASE_OUT:-$root/bin/release}
usage() { sed -n '2,9p' "$0" >&2; exit 2; }
cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  build)
    registry=${1:?registry, e.g. ghcr.io/kollect-dev}
    version=${2:?version, e.g. v0.2.0}
    make -C "$root" --no-print-directory web >&2
    VERSION=$version IMAGE_REPO=$registry "$here/images.sh" "$out/images" >/dev/null
    "$here/charts-package.sh" "$out/charts" "$version" "$registry" >&2
    cat "$out/images/images.txt"
    ;;
  push-images)
    dir=${1:-$out}/images
    "$here/images.sh" "$dir.push-unused" -push-from "$dir/oci"
    ;;
  push-charts)
    registry=${1:?registry, e.g. ghcr.io/kollect-dev}
    helm=$("$here/ensure-tools.sh")/helm
    for chart in "$out"/charts/*.tgz; do
      "$helm" push "$chart" "oci://$registry/charts"
    done
    ;;
  *) usage ;;
esac
