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
# The scripts users run (slurm/, env/) run under pipefail, where `... | grep -q` can fail a pipeline
# whose pattern matched: grep exits at the first match and a writer still writing gets SIGPIPE.
bad=$(git grep -nE '\|[[:space:]]*grep[[:space:]]+(-[a-zA-Z]*q|--quiet)' -- 'slurm/*.sh' 'env/*.sh' || true)
if [ -n "$bad" ]; then
  echo "FAIL: grep -q after a pipe in slurm/ or env/ (read the whole input: grep PATTERN >/dev/null):"
  echo "$bad"
  exit 1
fi
echo "no grep -q after a pipe in slurm/ and env/"
