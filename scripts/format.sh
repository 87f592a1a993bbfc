#!/usr/bin/env bash
# Formats Kiln's C++ and CUDA sources with clang-format and the repository's .clang-format.
#   scripts/format.sh [FILE...]          formats in place (only the files that change are written)
#   scripts/format.sh --check [FILE...]  changes nothing; lists the files that are not formatted and exits 1,
#                                        0 when every file is (scripts/test.sh runs this)
# Without FILE: every *.cc, *.h, *.cu, *.cuh, *.cpp and *.hpp that git tracks or would track (new files that
# are not ignored), less third_party/ and build*/; the CMake templates (cmake/*.h.in) are not C++ and are
# left alone. Outside a git checkout the same files are found with `find`.
# clang-format is pinned to major version 14: each major lays some code out differently, so a tree formatted
# by one fails the check of another. It is taken from $KILN_CLANG_FORMAT, else clang-format-14, else
# clang-format, and refused (exit 3) when its major version is not 14. Debian 12 (bookworm): `apt-get install
# clang-format` (scripts/setup.sh installs it); elsewhere install clang-format 14 and set KILN_CLANG_FORMAT.
# Exit codes: 0 formatted (or done), 1 --check found unformatted files, 2 bad usage, 3 no usable clang-format.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
want_major=14

check=0
files=()
while (($#)); do
  case "$1" in
    --check) check=1; shift;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0;;
    -*) echo "format.sh: unknown option '$1' (known: --check)" >&2; exit 2;;
    *) files+=("$1"); shift;;
  esac
done

# The clang-format to use, which must be major version $want_major.
if [ -n "${KILN_CLANG_FORMAT:-}" ]; then
  cf="$(command -v "$KILN_CLANG_FORMAT" || true)"
  [ -n "$cf" ] || { echo "format.sh: KILN_CLANG_FORMAT=$KILN_CLANG_FORMAT is not an executable" >&2; exit 3; }
else
  cf="$(command -v "clang-format-$want_major" || command -v clang-format || true)"
fi
if [ -z "$cf" ]; then
  echo "format.sh: clang-format $want_major not found. Install it: 'apt-get install clang-format' on Debian 12" \
    "(bookworm, whose clang-format is $want_major; scripts/setup.sh does this), or set KILN_CLANG_FORMAT to a" \
    "clang-format $want_major binary" >&2
  exit 3
fi
version="$("$cf" --version 2>/dev/null || true)"
major="$(printf '%s\n' "$version" | sed -n 's/.*clang-format version \([0-9][0-9]*\).*/\1/p' | head -1)"
if [ "$major" != "$want_major" ]; then
  echo "format.sh: $cf is version ${major:-unknown} ('$version'); Kiln's format is defined by clang-format" \
    "$want_major, whose output other versions do not reproduce. Install clang-format $want_major (Debian 12:" \
    "'apt-get install clang-format'; elsewhere the clang-format-$want_major package) or set KILN_CLANG_FORMAT to one" >&2
  exit 3
fi
style="$root/.clang-format"
[ -f "$style" ] || { echo "format.sh: $style is missing" >&2; exit 3; }

cd "$root"
if ((${#files[@]} == 0)); then
  exts=(cc h cu cuh cpp hpp)
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    specs=(); for e in "${exts[@]}"; do specs+=("*.$e"); done
    mapfile -t files < <(git ls-files --cached --others --exclude-standard -- "${specs[@]}" \
      ':(exclude)third_party/' ':(exclude)build*/' | sort -u)
  else
    names=(); for e in "${exts[@]}"; do names+=(-o -name "*.$e"); done
    mapfile -t files < <(find . \( -path ./third_party -o -path './build*' -o -path './.*' \) -prune -o \
      -type f \( "${names[@]:1}" \) -print | sed 's|^\./||' | sort)
  fi
fi

tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
bad=()
n=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue  # tracked but deleted in the work tree
  n=$((n + 1))
  "$cf" --style="file:$style" "$f" >"$tmp" || { echo "format.sh: clang-format failed on $f" >&2; exit 3; }
  cmp -s "$f" "$tmp" && continue
  bad+=("$f")
  if [ "$check" = 0 ]; then cat "$tmp" >"$f"; fi  # rewrites in place, keeping the file's mode
done

tool="clang-format ${version##*version }"
if [ "$check" = 1 ]; then
  if ((${#bad[@]})); then
    echo "format.sh: ${#bad[@]} of $n files are not formatted ($tool; 'bash scripts/format.sh' formats them):"
    printf '  %s\n' "${bad[@]}"
    exit 1
  fi
  echo "format.sh: every file is formatted ($n checked, $tool)"
else
  echo "format.sh: formatted ${#bad[@]} of $n files ($tool)"
  if ((${#bad[@]})); then printf '  %s\n' "${bad[@]}"; fi
fi
