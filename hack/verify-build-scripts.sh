#!/usr/bin/env bash
# Fails when a build script under hack/ would break on a cold machine although it passes on a
# warm one. The ensure-*.sh scripts skip a build whose cache entry exists, so a warm machine
# (CI's) never runs the build itself; this check does, without compiling anything:
#
#  1. dry run: every build entry point (hack/**/build.sh) runs from the repository's root, as
#     make runs it, with a `go` on PATH that turns `go build` and `go install` into their -n
#     form, and an `npm` that turns `npm install` into `npm install --dry-run`. Module and
#     package resolution happen exactly as in a cold build (workspace mode, replace directives,
#     the packages named, the npm registry's answer for the version pinned), but nothing is
#     compiled or installed: seconds on a warm module cache.
#  2. rule: every `go` command in a script under hack/ runs with GOWORK=off (on its line, or
#     exported earlier in the script), so what it builds never depends on the directory it is
#     run from or on a go.work the caller happens to be in. A script that means to build the
#     repository's own workspace modules says so with the line `# build-scripts: workspace`.
#
# Run first by `make test`. Exit status 1 names each offending script.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fail=0

# 2. The GOWORK=off rule (cheap, so first).
gocmd='(^|[;&|(`[:space:]])go[[:space:]]+(build|install|run|mod|list|get|tool|generate|test|vet)([[:space:]]|$)'
while IFS= read -r script; do
  grep -q '^# build-scripts: workspace' "$script" && continue
  exported=0
  n=0
  while IFS= read -r line; do
    n=$((n + 1))
    code=${line%%#*}
    if [[ $code =~ export[[:space:]]+([A-Z_]+=[^[:space:]]*[[:space:]]+)*GOWORK=off ]]; then exported=1; fi
    if [[ $code =~ $gocmd ]] && [ $exported = 0 ] && [[ $code != *GOWORK=off* ]]; then
      echo "$script:$n: go runs without GOWORK=off (it would resolve modules through whatever go.work encloses the caller): $line" >&2
      fail=1
    fi
  done <"$script"
done < <(find hack -name '*.sh' -type f | LC_ALL=C sort)

# 1. The dry run of every build entry point.
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
real_go=$(command -v go)
cat >"$shim/go" <<SHIM
#!/usr/bin/env bash
case "\${1:-}" in
  build|install) sub=\$1; shift; exec "$real_go" "\$sub" -n "\$@" >/dev/null ;;
esac
exec "$real_go" "\$@"
SHIM
chmod +x "$shim/go"
real_npm=$(command -v npm || echo npm)
cat >"$shim/npm" <<SHIM
#!/usr/bin/env bash
case "\${1:-}" in
  install) shift; exec "$real_npm" install --dry-run "\$@" ;;
esac
exec "$real_npm" "\$@"
SHIM
chmod +x "$shim/npm"
tools=$(sed -n '/^tool (/,/^)/{/^tool (/d;/^)/d;s/^[[:space:]]*//;p}' hack/tools/go.mod)
pids=()
scripts=()
while IFS= read -r build; do
  args=()
  [ "$build" = hack/tools/build.sh ] && read -r -a args <<<"$(echo $tools)"
  mkdir -p "$shim/out/$build"
  PATH="$shim:$PATH" "$build" "$shim/out/$build" "${args[@]}" >"$shim/out/$build.log" 2>&1 &
  pids+=($!)
  scripts+=("$build")
done < <(find hack -name build.sh -type f | LC_ALL=C sort)
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "${scripts[$i]} fails as a cold build would:" >&2
    sed 's/^/    /' "$shim/out/${scripts[$i]}.log" | tail -20 >&2
    fail=1
  fi
done
if [ $fail = 0 ]; then echo "build scripts resolve as a cold run would (${#scripts[@]} entry points)"; fi
exit $fail
