#!/usr/bin/env bash
# Installs the sink servers the tests start: Debian packages when missing (PostgreSQL, git,
# kcat, clang for the BigQuery emulator's cgo build) and one Go-built server per
# hack/servers/<name>/build.sh, each cached under
# ~/.cache/kollect/servers/<name>-<hash>. Prints the cache directories joined by ':', which
# `make test` exports as KOLLECT_SERVERS for e2e/testenv.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${KOLLECT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kollect}/servers

need_apt=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || need_apt+=(postgresql-15)
command -v git >/dev/null || need_apt+=(git)
command -v kcat >/dev/null || need_apt+=(kcat)
command -v clang++ >/dev/null || need_apt+=(clang)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing ${need_apt[*]} with apt-get" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >&2
fi

dirs=()
for build in "$here"/servers/*/build.sh; do
  dir=$(dirname "$build")
  name=$(basename "$dir")
  hash=$(cd "$dir" && find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)
  out=$cache/$name-$hash
  if [ ! -d "$out" ]; then
    echo "building test server $name into $out" >&2
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    "$build" "$out.tmp" >&2
    # Another build may have finished first: keep its result.
    mv -T "$out.tmp" "$out" 2>/dev/null || rm -rf "$out.tmp"
  fi
  dirs+=("$out")
done
(IFS=:; echo "${dirs[*]}")
