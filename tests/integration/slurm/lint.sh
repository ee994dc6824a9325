#!/usr/bin/env bash
# bash -n and shellcheck (when installed) over every shell script of slurm/, env/, these tests
# and tests/lint/.
set -euo pipefail
src=$1
cd "$src"
mapfile -t files < <(ls slurm/*.sh env/*.sh tests/integration/slurm/*.sh tests/lint/*.sh)
for f in "${files[@]}"; do bash -n "$f"; done
echo "bash -n: ${#files[@]} scripts OK"
if command -v shellcheck >/dev/null; then
  shellcheck -x "${files[@]}"
  echo "shellcheck $(shellcheck --version | sed -n 's/^version: //p'): ${#files[@]} scripts OK"
else
  echo "shellcheck not installed (env/install-debian.sh installs it): skipped"
fi
