#!/usr/bin/env bash
# A PostgreSQL server carried to a machine that has none and reaches no registry (the GPU machine), for
# scripts/postgres.sh there: Debian 12's postgresql-15 binaries of this machine, with the libraries they need.
#   scripts/pg-pack.sh pack          here: .pgdist/pg.tar.xz (ignored; name .pgdist in the call's carry) and
#                                    .pgdist/manifest.txt, from /usr/lib/postgresql/15 and /usr/share/postgresql/15
#   scripts/pg-pack.sh unpack DIR    there: extracts into DIR (made when missing), opens it to every user
#                                    (chmod a+rX: the server runs as kiln-pg under root), checks that the machine's
#                                    glibc is new enough and that the server runs, and prints one line on stdout,
#                                    the bin folder, for `KILN_PG_BIN=$(scripts/pg-pack.sh unpack DIR)
#                                    scripts/postgres.sh start PGDIR`
# The archive is a prefix laid out like /usr: lib/postgresql/15/bin (postgres, initdb, pg_ctl, psql, createdb,
# pg_isready), lib/postgresql/15/lib (the server modules the catalogs name: PL/pgSQL, snowball dictionaries,
# encoding conversions; no contrib, no JIT), share/postgresql/15, and lib/x86_64-linux-gnu: every shared
# library those and libpq.so.5 load (ldd), glibc's own excepted, which comes from the machine. PostgreSQL finds
# share/ and its modules relative to its bin folder, and each file's RUNPATH ($ORIGIN/../../../x86_64-linux-gnu
# for programs and modules, $ORIGIN for the libraries) finds the libraries, so nothing needs LD_LIBRARY_PATH
# (which, when set, is searched first). The machine's glibc must be at least the manifest's glibc_min (2.34);
# where it is older than the carried libstdc++ and libgcc_s need (glibc_min_gcc_runtime, 2.36), `unpack` sets
# them aside (lib/x86_64-linux-gnu/gcc-runtime/) and the machine's own serve ICU (GCC 12's or newer). Kiln
# itself takes the carried libpq with KILN_LIBPQ=DIR/lib/x86_64-linux-gnu/libpq.so.5. Debian's server reads zone
# names from /usr/share/zoneinfo, a fixed path, and carries none: on a machine without it initdb sets the POSIX
# zone 'UTC0' (no file needed) and the server runs, but SQL naming a zone ('UTC', 'Europe/Paris') fails there.
# DIR and every folder above it must let other users through (/tmp/kiln-pgdist, not under /root), for the
# server's user kiln-pg; `unpack` warns when one does not.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[pg-pack] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
usage() { echo "usage: scripts/pg-pack.sh pack | unpack DIR" >&2; exit 2; }

ver=15
arch=x86_64-linux-gnu
dist="$root/.pgdist"
archive="$dist/pg.tar.xz"
# The programs scripts/postgres.sh runs (initdb starts postgres, pg_ctl too), and pg_isready for the demo.
programs=(postgres initdb pg_ctl psql createdb pg_isready)
# glibc's own libraries: the machine's are used (they must match its ld-linux), never carried.
glibc_own='^(ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|'
glibc_own+='libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1|libnsl\.so\.1|libBrokenLocale\.so\.1|libthread_db\.so\.1|'
glibc_own+='libc_malloc_debug\.so\.0|libnss_[a-z0-9_]*\.so\.2|linux-vdso\.so\.1)$'
# GCC's runtime, carried but left out (moved to lib/x86_64-linux-gnu/gcc-runtime/) on a machine whose glibc is
# older than it needs: the machine's own then serves, which ICU 72 needs from GCC 12 or newer (GLIBCXX_3.4.30).
gcc_runtime='/(libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
stage=""

pack() {
  local src_lib=/usr/lib/postgresql/$ver src_share=/usr/share/postgresql/$ver
  [ -x "$src_lib/bin/postgres" ] && [ -d "$src_share" ] ||
    die "no PostgreSQL $ver under $src_lib and $src_share (scripts/setup.sh installs Debian's postgresql)"
  command -v patchelf >/dev/null || die "pack needs patchelf (apt-get install patchelf)"
  local libpq
  libpq="$(ldconfig -p | awk -v a="$arch" '$1 == "libpq.so.5" && $NF ~ a {print $NF; exit}')"
  [ -n "$libpq" ] || die "no libpq.so.5 on this machine (apt-get install libpq5)"

  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' EXIT
  local bin="$stage/lib/postgresql/$ver/bin" pkglib="$stage/lib/postgresql/$ver/lib"
  local share="$stage/share/postgresql/$ver" libs="$stage/lib/$arch"
  mkdir -p "$bin" "$pkglib" "$(dirname "$share")" "$libs"
  local p
  for p in "${programs[@]}"; do cp -L "$src_lib/bin/$p" "$bin/"; done
  cp -rL "$src_share" "$share"
  # The server modules the catalogs and initdb's scripts name ($libdir/NAME), and PL/pgSQL's extension.
  local mods
  mods="$(grep -ho '\$libdir/[A-Za-z0-9_]*' "$share"/*.sql "$share/postgres.bki" "$share"/extension/plpgsql*.control |
    sed 's|^\$libdir/||' | sort -u)"
  for p in dict_snowball plpgsql; do
    grep -qx "$p" <<<"$mods" || die "initdb's files do not name \$libdir/$p: a different PostgreSQL layout?"
  done
  for p in $mods; do cp -L "$src_lib/lib/$p.so" "$pkglib/"; done
  cp -L "$libpq" "$libs/libpq.so.5"

  # Every library these load, all the way down (ldd lists the whole tree), glibc's own excepted.
  local f name path missing=""
  for f in "$bin"/* "$pkglib"/*.so "$libpq"; do
    while read -r name path; do
      [[ "$name" =~ $glibc_own ]] && continue
      if [ "$path" = "not" ]; then missing+=" $name (of ${f##*/})"; continue; fi
      [ -e "$libs/$name" ] || cp -L "$path" "$libs/$name"
    done < <(ldd "$f" | awk '$2 == "=>" {print $1, $3}')
  done
  [ -z "$missing" ] || die "libraries not found here:$missing"

  for f in "$bin"/* "$pkglib"/*.so; do patchelf --set-rpath "\$ORIGIN/../../../$arch" "$f"; done
  for f in "$libs"/*; do patchelf --set-rpath "\$ORIGIN" "$f"; done
  chmod -R u+w,go-w,a+rX "$stage"
  chmod a+x "$bin"/*

  # The proof, with this machine's libraries still around: every library a carried file loads is the
  # carried one (RUNPATH comes before the system folders), or glibc's.
  local bad=""
  for f in "$bin"/* "$pkglib"/*.so "$libs"/*; do
    while read -r name path; do
      [[ "$name" =~ $glibc_own ]] && continue
      [ "$path" = "not" ] || path="$(realpath -m "$path")"
      case "$path" in "$libs"/*) ;; *) bad+=" ${f#"$stage"/} -> $name ($path)";; esac
    done < <(env -u LD_LIBRARY_PATH -u LD_PRELOAD ldd "$f" | awk '$2 == "=>" {print $1, $3}')
  done
  [ -z "$bad" ] || die "carried files load libraries from outside the prefix:$bad"
  "$bin/postgres" -V >/dev/null && "$bin/psql" -V >/dev/null || die "the patched programs do not run"

  # The newest glibc symbol version the carried files need: the machine's glibc must be at least that.
  # GCC's runtime (libstdc++, libgcc_s: ICU's) is counted apart: Debian 12's needs glibc 2.36, the rest less.
  local glibc_max glibc_cxx f
  newest_glibc() { for f in "$@"; do readelf -V --wide "$f"; done |
    grep -o 'Name: GLIBC_[0-9.]*' | sed 's/Name: GLIBC_//' | sort -uV | tail -1; }
  local core=("$bin"/* "$pkglib"/*.so) runtime=()
  for f in "$libs"/*; do
    if [[ "$f" =~ $gcc_runtime ]]; then runtime+=("$f"); else core+=("$f"); fi
  done
  glibc_max="$(newest_glibc "${core[@]}")"
  glibc_cxx="$(newest_glibc "${runtime[@]}")"
  {
    echo "postgresql=$("$bin/postgres" -V | sed 's/^postgres (PostgreSQL) //')"
    echo "package=$(dpkg-query -W -f='${Package} ${Version}' "postgresql-$ver" 2>/dev/null || echo '?')"
    echo "built_on=$(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(getconf GNU_LIBC_VERSION | awk '{print $2}')"
    echo "glibc_min=$glibc_max"
    echo "glibc_min_gcc_runtime=$glibc_cxx"
    echo "revision=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "programs=${programs[*]}"
    echo "modules=$(tr '\n' ' ' <<<"$mods")"
    echo "libraries=$(cd "$libs" && echo *)"
  } >"$stage/pgdist-manifest"

  mkdir -p "$dist"
  rm -f "$archive" "$archive.tmp"
  tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner -cf - . | xz -9 -T0 >"$archive.tmp"
  mv "$archive.tmp" "$archive"
  cp "$stage/pgdist-manifest" "$dist/manifest.txt"
  log "$(du -sh "$stage" | cut -f1) unpacked: $(ls "$bin" | wc -l) programs, $(ls "$pkglib" | wc -l) modules," \
    "$(ls "$libs" | wc -l) libraries; needs glibc >= $glibc_max ($glibc_cxx for the carried libstdc++, libgcc_s)"
  log "$archive: $(du -h "$archive" | cut -f1) ($(stat -c %s "$archive") bytes)"
}

unpack() {
  local dir="$1"
  [ -f "$archive" ] || die "no $archive: run 'scripts/pg-pack.sh pack' where PostgreSQL is installed, carry .pgdist"
  mkdir -p "$dir"; dir="$(cd "$dir" && pwd)"
  # xz may be missing on the machine; Python's tarfile reads .xz too.
  if command -v xz >/dev/null; then
    xz -dc "$archive" | tar -C "$dir" --no-same-owner -xf -
  elif command -v python3 >/dev/null; then
    python3 - "$archive" "$dir" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    if hasattr(tarfile, "data_filter"):
        t.extractall(sys.argv[2], filter="tar")
    else:
        t.extractall(sys.argv[2])
PY
  else
    die "neither xz nor python3 here to read $archive"
  fi
  chmod -R a+rX "$dir"
  local bin="$dir/lib/postgresql/$ver/bin"
  [ -x "$bin/postgres" ] || die "$archive held no lib/postgresql/$ver/bin/postgres"

  # The machine's glibc against what the carried files need. One older than the carried GCC runtime needs
  # (Debian 12's: 2.36) leaves that runtime out, for the machine's own libstdc++ (GCC 12 or newer) and libgcc_s.
  local libs="$dir/lib/$arch" need need_cxx have out
  need="$(sed -n 's/^glibc_min=//p' "$dir/pgdist-manifest")"
  need_cxx="$(sed -n 's/^glibc_min_gcc_runtime=//p' "$dir/pgdist-manifest")"
  have="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')" || true
  older() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }
  # A prefix unpacked before on an older machine: the runtime goes back first.
  if [ -d "$libs/gcc-runtime" ]; then mv "$libs"/gcc-runtime/* "$libs/"; rmdir "$libs/gcc-runtime"; fi
  if [ -z "$have" ]; then
    log "cannot tell this machine's glibc version; the carried files need $need or newer ($need_cxx for libstdc++)"
  elif older "$have" "$need"; then
    die "this machine's glibc is $have; the carried PostgreSQL needs $need or newer"
  elif older "$have" "$need_cxx"; then
    log "glibc $have is older than the carried libstdc++ and libgcc_s need ($need_cxx): the machine's own serve"
    mkdir -p "$libs/gcc-runtime"; mv "$libs/libstdc++.so.6" "$libs/libgcc_s.so.1" "$libs/gcc-runtime/"
  fi
  local p
  for p in postgres initdb psql; do
    out="$("$bin/$p" -V 2>&1)" ||
      die "the unpacked $p does not run: $out"$'\n'"$(ldd "$bin/$p" 2>&1 | grep -E 'not found|version' || true)"
  done
  out="$("$bin/postgres" -V)"
  # The server runs as kiln-pg under root: every folder above the prefix must let it through.
  local d="$dir"
  while [ "$d" != / ]; do
    d="$(dirname "$d")"
    [ "$(( $(stat -c '%a' "$d" | sed 's/^.*\(.\)$/\1/') & 1 ))" = 1 ] ||
      log "warning: $d is closed to other users (mode $(stat -c %a "$d")): kiln-pg cannot run the server from" \
        "$dir; unpack under /tmp instead, or chmod o+x $d"
  done
  log "$out in $dir (glibc ${have:-?}, needs $need)"
  echo "$bin"
}

case "${1:-}" in
  pack) [ $# = 1 ] || usage; pack;;
  unpack) [ $# = 2 ] && [ -n "$2" ] || usage; unpack "$2";;
  *) usage;;
esac
