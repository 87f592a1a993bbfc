#!/usr/bin/env bash
# Installs everything Kiln needs on a fresh Debian machine, and is safe to re-run.
#  - Debian packages: compilers, CMake/Ninja, SQLite, nlohmann-json, CLI11, xxHash, GoogleTest,
#    clang-format (14 on Debian 12: the version scripts/format.sh pins), ccache (scripts/build.sh uses it),
#    and PostgreSQL (15 on Debian 12): the server the tests start (scripts/postgres.sh) and libpq-dev.
#  - cuDNN Frontend headers from PyPI's nvidia-cudnn-frontend wheel, pinned by version and sha256.
# Everything the build reads is gathered under third_party/ (git-ignored), so the same folder can be
# carried to a machine that reaches no registry (the GPU machine) and the build there needs nothing else.
# Of libpq only its client headers are copied (third_party/postgresql/include/): Kiln loads libpq.so.5 with
# dlopen at run time, so nothing links against it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tp="$root/third_party"

# Pinned: cuDNN Frontend 1.32.0 (docs/h200-results.md has the 1.23.0 -> 1.32.0 move, measured on the H200).
FE_VERSION=1.32.0
# Known wheels: version -> sha256. The pin must be one of them; --extra-frontend V unpacks another known
# version beside it (third_party/cudnn_frontend-V), for before/after comparisons (-DKILN_CUDNN_FRONTEND_DIR).
declare -A FE_SHA256=(
  [1.32.0]=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
  [1.23.0]=7bdae232a3071501012611fab14aae34dd16983205e56d3c1641317910fdd385
)
extra_fe=()
while (($#)); do
  case "$1" in
    --extra-frontend) extra_fe+=("${2:?--extra-frontend needs a version}"); shift 2;;
    *) echo "setup.sh: unknown option '$1' (known: --extra-frontend VERSION)" >&2; exit 2;;
  esac
done

log() { printf '[setup] %s\n' "$*"; }

need_pkgs=()
for p in cmake ninja-build g++ unzip python3-pip libsqlite3-dev nlohmann-json3-dev libcli11-dev libxxhash-dev \
         googletest clang-format ccache postgresql libpq-dev python3-venv python3-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
  if command -v apt-get >/dev/null 2>&1; then
    log "installing Debian packages: ${need_pkgs[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    log "missing packages (${need_pkgs[*]}) and no apt-get: install them by hand"; exit 3
  fi
fi

# fetch_frontend VERSION DEST: the wheel from PyPI, checked against its pinned sha256, include/ unpacked.
fetch_frontend() {
  local v="$1" dest="$2" sha="${FE_SHA256[$1]:-}"
  [ -n "$sha" ] || { log "cuDNN Frontend $v has no pinned sha256 here (known: ${!FE_SHA256[*]})"; exit 2; }
  local stamp="$dest/.version-$v"
  [ -f "$stamp" ] && return 0
  log "fetching cuDNN Frontend $v from PyPI"
  local dl; dl="$(mktemp -d)"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    --abi cp311 --platform manylinux_2_28_x86_64 -d "$dl" "nvidia-cudnn-frontend==$v"
  local whl="$dl/nvidia_cudnn_frontend-$v-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
  echo "$sha  $whl" | sha256sum -c --quiet -
  rm -rf "$dest"; mkdir -p "$dest"
  unzip -q "$whl" 'include/*' -d "$dest"
  rm -rf "$dl"; touch "$stamp"
}
mkdir -p "$tp"; rm -f "$tp"/.cudnn_frontend-*  # stamps of the layout before --extra-frontend
fetch_frontend "$FE_VERSION" "$tp/cudnn_frontend"
for v in "${extra_fe[@]}"; do fetch_frontend "$v" "$tp/cudnn_frontend-$v"; done

# Header-only and static dependencies, copied from the Debian packages so the folder travels whole.
mkdir -p "$tp/include/nlohmann" "$tp/include/CLI" "$tp/sqlite/include" "$tp/sqlite/lib" \
  "$tp/postgresql/include"
cp -ru /usr/include/nlohmann/. "$tp/include/nlohmann/"
cp -ru /usr/include/CLI/. "$tp/include/CLI/"
cp -u /usr/include/xxhash.h "$tp/include/"
cp -u /usr/include/sqlite3.h /usr/include/sqlite3ext.h "$tp/sqlite/include/"
cp -u /usr/lib/x86_64-linux-gnu/libsqlite3.a "$tp/sqlite/lib/"
cp -u /usr/include/postgresql/libpq-fe.h /usr/include/postgresql/postgres_ext.h \
  /usr/include/postgresql/pg_config_ext.h "$tp/postgresql/include/"
# googletest: copied only when it differs from the package's, so that a re-run leaves the build's inputs
# (and their timestamps) untouched and nothing is rebuilt; a changed package is copied with fresh timestamps.
if ! diff -rq /usr/src/googletest "$tp/googletest" >/dev/null 2>&1; then
  log "copying googletest from /usr/src/googletest"
  rm -rf "$tp/googletest" && cp -r /usr/src/googletest "$tp/googletest"
fi
# The Python package's build and tests (python/, docs/python.md): a venv with python/requirements-dev.txt's pinned
# packages (nanobind, scikit-build-core, pytest, numpy), made again when that file changes.
py_venv="$tp/python"
req="$root/python/requirements-dev.txt"
py_stamp="$py_venv/.requirements-$(sha256sum "$req" | cut -c1-16)"
if [ ! -f "$py_stamp" ]; then
  log "Python venv third_party/python: $(grep -v '^#' "$req" | tr '\n' ' ')"
  rm -rf "$py_venv"
  python3 -m venv "$py_venv"
  "$py_venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  touch "$py_stamp"
fi
log "ready: Debian packages, cuDNN Frontend $FE_VERSION, third_party/ ($(du -sh "$tp" | cut -f1))"
