#!/usr/bin/env bash
# The Kollect fleet scenario on three kind clusters (hosts with Docker): the hub runs in the first
# cluster from charts/hub, each cluster gets charts/agent registered with a bootstrap token, a
# bundle is rolled out through the hub's API, and every agent exports its rows to one shared
# PostgreSQL and one shared git repository. The script checks the results and tears everything
# down (KEEP=1 keeps it for a look). The same scenario runs in CI on local control planes in
# e2e/fleet (go test ./e2e/fleet/).
#
# Needs: docker, kind, kubectl, helm, go, curl, jq, openssl, git.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
prefix=${KIND_PREFIX:-kollect}
clusters=("$prefix-1" "$prefix-2" "$prefix-3")
pg=$prefix-postgres
hub_port=30443 # service.nodePort in hub-values.yaml
keep=${KEEP:-0}
work=$(mktemp -d "${TMPDIR:-/tmp}/kollect-kind-fleet.XXXXXX")

log() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

for bin in docker kind kubectl helm go curl jq openssl git; do
  command -v "$bin" >/dev/null || die "$bin is required"
done

cleanup() {
  local rc=$?
  if [ "$keep" = 1 ]; then
    log "KEEP=1: clusters ${clusters[*]}, container $pg and $work are left running"
    return
  fi
  log "tearing down"
  for c in "${clusters[@]}"; do kind delete cluster --name "$c" >/dev/null 2>&1 || true; done
  docker rm -f "$pg" >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

# retry TIMEOUT_SECONDS DESCRIPTION COMMAND...: run COMMAND until it succeeds.
retry() {
  local timeout=$1 what=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || die "timed out after ${timeout}s waiting for $what"
    sleep 3
  done
}

kc() { local c=$1; shift; kubectl --context "kind-$c" "$@"; }

log "building the images with make images' builder (linux/$(go env GOARCH) only, no Docker build)"
# The same builder and the same images as a release: go-containerregistry writes OCI archives
# that `kind load image-archive` imports into each node's containerd.
(cd "$root" && make --no-print-directory web >/dev/null)
PLATFORMS="linux/$(go env GOARCH)" "$root/hack/images.sh" "$work/images" >/dev/null
tag=$(sed -n '1s/^[^@]*:\([^:@]*\)@.*/\1/p' "$work/images/images.txt")
[ -n "$tag" ] || die "no image tag in $work/images/images.txt"

log "shared git repository (mounted into every kind node at /fleet.git)"
git init -q --bare --initial-branch=main "$work/fleet.git"
# The agents run as UID 65532 and push through the bind mount.
chmod -R a+rwX "$work/fleet.git"
cat >"$work/kind.yaml" <<KIND
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    extraMounts:
      - hostPath: $work/fleet.git
        containerPath: /fleet.git
KIND

log "creating kind clusters ${clusters[*]}"
for c in "${clusters[@]}"; do
  kind create cluster --name "$c" --config "$work/kind.yaml" --wait 120s >/dev/null
  kind load image-archive --name "$c" "$work/images/agent.tar" >/dev/null
done
kind load image-archive --name "${clusters[0]}" "$work/images/hub.tar" >/dev/null

log "shared PostgreSQL on the kind network"
docker rm -f "$pg" >/dev/null 2>&1 || true
docker run -d --name "$pg" --network kind -e POSTGRES_USER=kollect -e POSTGRES_PASSWORD=kollect \
  -e POSTGRES_DB=inventory postgres:17-alpine >/dev/null
retry 60 "PostgreSQL" docker exec "$pg" pg_isready -q -U kollect -d inventory
pg_ip=$(docker inspect -f '{{(index .NetworkSettings.Networks "kind").IPAddress}}' "$pg")

log "hub in ${clusters[0]} (charts/hub, NodePort $hub_port)"
hub_ip=$(docker inspect -f '{{(index .NetworkSettings.Networks "kind").IPAddress}}' "${clusters[0]}-control-plane")
hub="https://$hub_ip:$hub_port"
helm --kube-context "kind-${clusters[0]}" install kollect-hub "$root/charts/hub" -n kollect-hub --create-namespace \
  --values "$here/hub-values.yaml" --set image.tag="$tag" --set "tls.hosts={$hub_ip}" --wait --timeout 3m >/dev/null
hub_log() { kc "${clusters[0]}" -n kollect-hub logs deploy/kollect-hub; }
fingerprint=$(hub_log | sed -n 's/.*Agents pin the hub CA: \(sha256:[0-9a-f]*\).*/\1/p' | head -1)
# The token is never logged: read it in the pod (the image has no shell, the hub prints it).
admin=$(kc "${clusters[0]}" -n kollect-hub exec deploy/kollect-hub -- kollect-hub --data-dir=/var/lib/kollect-hub --print-admin-token)
[ -n "$fingerprint" ] || die "no CA fingerprint in the hub's log"
[ -n "$admin" ] || die "the hub printed no admin token"
# The CA the hub serves must be the one it logged: that is what agents pin.
curl -sfk "$hub/ca.crt" >"$work/hub-ca.crt"
served="sha256:$(openssl x509 -in "$work/hub-ca.crt" -outform der | sha256sum | cut -d' ' -f1)"
[ "$served" = "$fingerprint" ] || die "served CA $served is not the logged $fingerprint"

# fleet METHOD JSON: call FleetService over Connect's JSON protocol as the admin, verifying the
# hub against its CA.
fleet() {
  curl -sf --cacert "$work/hub-ca.crt" -H 'Content-Type: application/json' \
    -H "Authorization: Bearer $admin" "$hub/kollect.fleet.v1.FleetService/$1" -d "$2"
}

log "bootstrap token and agents"
token=$(fleet CreateBootstrapToken '{"description":"kind-fleet","ttl":"3600s","maxUses":"3"}' | jq -er .secret)
for c in "${clusters[@]}"; do
  kc "$c" create namespace kollect-system >/dev/null
  # Bundles land in kollect-fleet (the chart's hub.namespaces, created by the chart), never in
  # the agent's own namespace.
  helm --kube-context "kind-$c" install kollect-agent "$root/charts/agent" -n kollect-system \
    --values "$here/agent-values.yaml" --set image.tag="$tag" --set clusterName="$c" \
    --set hub.url="$hub" --set hub.caFingerprint="$fingerprint" --set hub.bootstrapToken.token="$token" \
    --wait --timeout 3m >/dev/null
  # Sink credentials stay in each cluster; the bundle only references them.
  kc "$c" -n kollect-fleet create secret generic pg-credentials \
    --from-literal=username=kollect --from-literal=password=kollect >/dev/null
  # A sink the hub delivers reads only Secrets the cluster admin labelled for it.
  kc "$c" -n kollect-fleet label secret pg-credentials kollect.dev/hub-sinks=allow >/dev/null
  # The bundle's PostgreSQL sink is plaintext (sslMode disable): only the cluster may allow it.
  kc "$c" apply -f "$here/grant.yaml" >/dev/null
  for color in red blue; do
    kc "$c" -n default create configmap "$color" --from-literal=color="$color" >/dev/null
    kc "$c" -n default label configmap "$color" inventory=fleet >/dev/null
  done
done

registered() { [ "$(fleet ListClusters '{}' | jq '.clusters | length')" = 3 ]; }
retry 120 "three registered clusters" registered

log "rolling out the bundle through the hub"
bundle=$(sed -e "s/PG_HOST/$pg_ip/" -e "s/PG_PORT/5432/" "$here/bundle.yaml")
fleet ApplyBundle "$(jq -n --arg m "$bundle" \
  '{name: "inventory", manifests: $m, clusterSelector: {matchLabels: {env: "kind"}}, message: "kind-fleet"}')" |
  jq -e '.selectedClusters | length == 3' >/dev/null || die "the bundle did not select the three clusters"

log "checking the exports"
in_git() {
  local files
  files=$(git --git-dir "$work/fleet.git" ls-tree -r --name-only main 2>/dev/null) || return 1
  for c in "${clusters[@]}"; do grep -qx "$c/fleet.yaml" <<<"$files" || return 1; done
}
retry 180 "every cluster's document in the git repository" in_git
for c in "${clusters[@]}"; do
  doc=$(git --git-dir "$work/fleet.git" show "main:$c/fleet.yaml")
  grep -q "cluster: $c" <<<"$doc" || die "$c/fleet.yaml is not labelled with its cluster"
  grep -q "color: blue" <<<"$doc" || die "$c/fleet.yaml lacks the blue ConfigMap"
done

pg_rows() {
  docker exec "$pg" psql -qtAX -U kollect -d inventory -c \
    "SELECT cluster || '=' || count(*) FROM kollect.rows WHERE inventory = 'fleet' GROUP BY cluster ORDER BY cluster" 2>/dev/null
}
in_pg() { [ "$(pg_rows | tr '\n' ' ')" = "${clusters[0]}=2 ${clusters[1]}=2 ${clusters[2]}=2 " ]; }
retry 180 "two rows per cluster in PostgreSQL" in_pg

healthy() {
  fleet GetFleetHealth '{}' | jq -e '(.clustersOnline | tonumber) == 3 and ((.clustersConfigSkew // "0") | tonumber) == 0' >/dev/null
}
retry 60 "three online clusters running the bundle" healthy

log "a change in one cluster reaches both sinks, labelled with that cluster only"
kc "${clusters[1]}" -n default create configmap green --from-literal=color=green >/dev/null
kc "${clusters[1]}" -n default label configmap green inventory=fleet >/dev/null
green() {
  git --git-dir "$work/fleet.git" show "main:${clusters[1]}/fleet.yaml" 2>/dev/null | grep -q "color: green" &&
    [ "$(pg_rows | tr '\n' ' ')" = "${clusters[0]}=2 ${clusters[1]}=3 ${clusters[2]}=2 " ]
}
retry 120 "the green ConfigMap in git and PostgreSQL" green

printf '\nPASS: kind fleet scenario (%s)\n' "${clusters[*]}"
