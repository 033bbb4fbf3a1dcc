#!/usr/bin/env bash
# Fails, listing them, when C++/CUDA files of the clone differ from what clang-format makes
# of them with .clang-format. Checks the tracked files plus new ones git does not ignore.
# `scripts/check_format.sh --fix` rewrites those files in place instead.
#
# The style is pinned to Debian 12's clang-format 14 (scripts/setup.sh installs it): other
# versions format some constructs differently. SIAMESE_CLANG_FORMAT names another binary.
set -euo pipefail
cd "$(dirname "$0")/.."

clang_format=${SIAMESE_CLANG_FORMAT:-}
if [ -z "$clang_format" ]; then
  for candidate in clang-format-14 clang-format; do
    if command -v "$candidate" >/dev/null; then
      clang_format=$candidate
      break
    fi
  done
fi
[ -n "$clang_format" ] || {
  echo "check_format: clang-format not found (apt-get install clang-format; scripts/setup.sh does)" >&2
  exit 1
}
version=$("$clang_format" --version)
if [[ $version != *"version 14."* ]] && [ -z "${SIAMESE_CLANG_FORMAT:-}" ]; then
  echo "check_format: the style is clang-format 14's (Debian 12); $clang_format is: $version" >&2
  exit 1
fi

files=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] && files+=("$f")
done < <(git ls-files -z --cached --others --exclude-standard -- '*.cpp' '*.h' '*.cu' '*.cuh' '*.hpp')
((${#files[@]})) || { echo "check_format: no C++ files found" >&2; exit 1; }

if [ "${1:-}" = --fix ]; then
  "$clang_format" -i "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi

# --dry-run --Werror prints "FILE:LINE:COL: error: code should be clang-formatted" for each
# difference and exits non-zero; the names before the first colon are the files to list.
report=$("$clang_format" --dry-run --Werror "${files[@]}" 2>&1) && status=0 || status=$?
if ((status)); then
  mapfile -t bad < <(sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*/\1/p' <<<"$report" | sort -u)
  if ((${#bad[@]} == 0)); then
    echo "$report" >&2  # clang-format failed for another reason: show it
  else
    echo "check_format: ${#bad[@]} files differ from .clang-format ($version):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    echo "check_format: fix with scripts/check_format.sh --fix (or clang-format -i FILES)" >&2
  fi
  exit 1
fi
echo "check_format: ${#files[@]} C++ files formatted"
