#!/usr/bin/env bash
# bash -n and shellcheck over every shell script git tracks (*.sh, and files whose first line runs
# bash or sh: .ci/run). shellcheck is required: env/install-debian.sh installs it, and a machine
# without it fails here rather than passing unchecked.
set -euo pipefail
src=$1
cd "$src"
files=()
while IFS= read -r f; do
  case "$f" in
    *.sh) files+=("$f") ;;
    *) [ -f "$f" ] && head -n 1 "$f" | grep -qE '^#!.*[/ ](bash|sh)$' && files+=("$f") ;;
  esac
done < <(git ls-files)
[ "${#files[@]}" -ge 50 ] || { echo "FAIL: only ${#files[@]} shell scripts found under $src"; exit 1; }
for f in "${files[@]}"; do bash -n "$f"; done
echo "bash -n: ${#files[@]} scripts OK"
command -v shellcheck >/dev/null ||
  { echo "FAIL: shellcheck not installed (bash env/install-debian.sh installs it)"; exit 1; }
shellcheck -x "${files[@]}"
echo "shellcheck $(shellcheck --version | sed -n 's/^version: //p'): ${#files[@]} scripts OK"
