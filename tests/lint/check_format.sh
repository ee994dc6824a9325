#!/usr/bin/env bash
# ctest lint.format: every C/C++ file git tracks is as clang-format 14 (Debian bookworm) formats it
# with the root .clang-format. Fails listing the files that are not; skips (77) without version 14,
# since other versions format differently.
set -euo pipefail
src=$1
cd "$src"
fmt=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null && "$c" --version | grep -q 'version 14\.'; then
    fmt=$c
    break
  fi
done
if [ -z "$fmt" ]; then
  echo "clang-format 14 not installed (env/install-debian.sh installs it): skipped"
  exit 77
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.c' '*.cc' '*.cpp' '*.h' '*.hpp')
else
  mapfile -t files < <(find src jobs data_prep analysis tests -type f \
    \( -name '*.c' -o -name '*.cc' -o -name '*.cpp' -o -name '*.h' -o -name '*.hpp' \) | sort)
fi
# --dry-run prints one warning per misplaced line, each starting with the file's path.
mapfile -t bad < <("$fmt" --dry-run "${files[@]}" 2>&1 | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: warning:.*/\1/p' | sort -u)
if [ "${#bad[@]}" -gt 0 ]; then
  echo "not formatted by $($fmt --version):"
  printf '  %s\n' "${bad[@]}"
  echo "fix: $fmt -i ${bad[*]}"
  exit 1
fi
echo "$fmt: ${#files[@]} files formatted"
