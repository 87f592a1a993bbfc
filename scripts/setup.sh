#!/usr/bin/env bash
# Installs everything Kiln needs on a fresh Debian machine, and is safe to re-run.
#  - Debian packages: compilers, CMake/Ninja, SQLite, nlohmann-json, CLI11, xxHash, GoogleTest.
#  - cuDNN Frontend headers from PyPI's nvidia-cudnn-frontend wheel, pinned by version and sha256.
# Everything the build reads is gathered under third_party/ (git-ignored), so the same folder can be
# carried to a machine that reaches no registry (the GPU machine) and the build there needs nothing else.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tp="$root/third_party"

# Pinned: cuDNN Frontend 1.23.0 (see README: deviceless compilation against cuDNN 9.19 was proven with it).
FE_VERSION=1.23.0
FE_WHEEL=nvidia_cudnn_frontend-1.23.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
FE_SHA256=7bdae232a3071501012611fab14aae34dd16983205e56d3c1641317910fdd385

log() { printf '[setup] %s\n' "$*"; }

need_pkgs=()
for p in cmake ninja-build g++ unzip python3-pip libsqlite3-dev nlohmann-json3-dev libcli11-dev libxxhash-dev googletest; do
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

mkdir -p "$tp"
stamp="$tp/.cudnn_frontend-$FE_VERSION"
if [ ! -f "$stamp" ]; then
  log "fetching cuDNN Frontend $FE_VERSION from PyPI"
  dl="$(mktemp -d)"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    --abi cp311 --platform manylinux_2_28_x86_64 -d "$dl" "nvidia-cudnn-frontend==$FE_VERSION"
  echo "$FE_SHA256  $dl/$FE_WHEEL" | sha256sum -c --quiet -
  rm -rf "$tp/cudnn_frontend"; mkdir -p "$tp/cudnn_frontend"
  unzip -q "$dl/$FE_WHEEL" 'include/*' -d "$tp/cudnn_frontend"
  rm -rf "$dl"; rm -f "$tp"/.cudnn_frontend-*; touch "$stamp"
fi

# Header-only and static dependencies, copied from the Debian packages so the folder travels whole.
mkdir -p "$tp/include/nlohmann" "$tp/include/CLI" "$tp/sqlite/include" "$tp/sqlite/lib"
cp -ru /usr/include/nlohmann/. "$tp/include/nlohmann/"
cp -ru /usr/include/CLI/. "$tp/include/CLI/"
cp -u /usr/include/xxhash.h "$tp/include/"
cp -u /usr/include/sqlite3.h /usr/include/sqlite3ext.h "$tp/sqlite/include/"
cp -u /usr/lib/x86_64-linux-gnu/libsqlite3.a "$tp/sqlite/lib/"
rm -rf "$tp/googletest" && cp -r /usr/src/googletest "$tp/googletest"
log "third_party ready: $(du -sh "$tp" | cut -f1)"
