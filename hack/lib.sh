# Shared by the hack/ensure-*.sh scripts (source it; it runs nothing by itself).
#
# Every build script must work from a clean clone with empty caches, run from any directory:
# the Go builds below all run with GOWORK=off (the helper modules under hack/ are not part of
# the repository's go.work workspace) and are checked by hack/verify-build-scripts.sh.

# kollect_cache: the version-keyed cache every build script writes into.
kollect_cache() { echo "${KOLLECT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kollect}"; }

# apt_install PKG...: installs the Debian packages given (only the missing ones are passed in),
# waiting for another apt-get to finish rather than failing on dpkg's lock, so that the ensure
# scripts may run concurrently.
apt_install() {
  [ $# -gt 0 ] || return 0
  local sudo=
  [ "$(id -u)" = 0 ] || sudo=sudo
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "missing Debian packages: $* (install them and retry)" >&2
    return 1
  fi
  echo "installing $* with apt-get" >&2
  local lock=(-o DPkg::Lock::Timeout=900)
  # A new machine has no package lists: update first there; elsewhere update only when the
  # install fails (lists too old to know a package).
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    $sudo apt-get "${lock[@]}" update -qq >&2
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get "${lock[@]}" install -y -qq "$@" >&2 ||
    { $sudo apt-get "${lock[@]}" update -qq >&2 &&
      DEBIAN_FRONTEND=noninteractive $sudo apt-get "${lock[@]}" install -y -qq "$@" >&2; }
}

# timed NAME CMD...: runs CMD and reports how long it took on stderr, in the form the cold-path
# figures in docs/performance.md are read from ("phase NAME: 12 s").
timed() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "phase $name: $((SECONDS - start)) s$([ $rc = 0 ] || echo " (failed, exit $rc)")" >&2
  return $rc
}

# build_into OUT NAME CMD [ARG...]: runs CMD TMP ARG... (TMP a fresh directory beside OUT) and
# renames it to OUT, unless OUT exists. Concurrent callers for the same OUT (several `make`
# or `go test` runs on a cold machine) wait for the first build instead of repeating it, and
# an interrupted build never leaves a half-filled OUT.
build_into() {
  local out=$1 name=$2 cmd=$3 tmp lockfd
  shift 3
  mkdir -p "$(dirname "$out")"
  exec {lockfd}>"$out.lock"
  if ! flock -n "$lockfd"; then
    echo "waiting for another build of $name into $out" >&2
    flock "$lockfd"
  fi
  if [ -e "$out" ]; then
    exec {lockfd}>&-
    return 0
  fi
  tmp=$(mktemp -d "$out.tmp.XXXXXX")
  timed "$name" "$cmd" "$tmp" "$@" >&2 || { rm -rf "$tmp"; exec {lockfd}>&-; return 1; }
  mv -T "$tmp" "$out" 2>/dev/null || rm -rf "$tmp" # a build without this lock finished first
  exec {lockfd}>&-
}
