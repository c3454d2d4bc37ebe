#!/usr/bin/env bash
# Builds the agent and hub images into OUT (default bin/images) with hack/images, a small
# go-containerregistry program: no Docker daemon, reproducible digests (every timestamp is the
# commit's time), linux/amd64 and linux/arm64, an SPDX SBOM per platform image.
# Usage: hack/images.sh [OUT] [FLAG...]   (flags of hack/images: -push, -platforms, -only, -repo)
# Environment: IMAGE_REPO (default ghcr.io/kollect-dev), PLATFORMS, VERSION (hack/version.sh),
# SOURCE_DATE_EPOCH (default the commit's time).
# The hub embeds the dashboard: run `make web` first (`make images` does).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
. "$here/lib.sh"
out=${1:-$root/bin/images}
[ $# -eq 0 ] || shift
mod=$here/images
hash=$(cd "$mod" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' -o -name '*.sh' \) | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)
tool=$(kollect_cache)/images-$hash
if [ ! -x "$tool/images" ]; then
  build_into "$tool" images "$mod/build.sh"
fi
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
exec "$tool/images" -root "$root" -out "$out" -version "${VERSION:-$("$here/version.sh")}" \
  -revision "$revision" -epoch "$epoch" -repo "${IMAGE_REPO:-ghcr.io/kollect-dev}" \
  -platforms "${PLATFORMS:-linux/amd64,linux/arm64}" "$@"
