#!/usr/bin/env bash
# Installs and builds everything `make test` needs, as concurrently as a 2-core machine allows:
# the Debian packages first (one apt-get run), then the control plane, the node's components,
# the sink servers, the chart tools and the dashboard's node_modules side by side. A warm machine does nothing and
# takes about a second. Each build reports "phase NAME: N s" on stderr (the figures of
# docs/performance.md); the output of each step goes to stderr prefixed with its name.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
timed packages "$here/ensure-packages.sh"

pids=()
names=()
run() {
  local name=$1
  shift
  # Prefix each line so that the interleaved logs stay readable.
  { "$@" >/dev/null 2> >(sed -u "s/^/[$name] /" >&2); } &
  pids+=($!)
  names+=("$name")
}
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
run k8s "$here/ensure-k8s.sh"
run node "$here/ensure-node.sh"
run servers "$here/ensure-servers.sh"
run tools "$here/ensure-tools.sh"
run web "$here/ensure-web.sh" --browser
failed=()
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed+=("${names[$i]}")
done
trap - EXIT
if [ ${#failed[@]} -gt 0 ]; then
  echo "ensure-all: failed: ${failed[*]} (see the [name] lines above)" >&2
  exit 1
fi
