#!/usr/bin/env bash
# The Lmod module of the checkout (env/modules/fnvlp, issue 29) under Debian's Lmod: loading it
# puts the executables of BUILD_DIR on PATH and sets FNVLP_ROOT/FNVLP_BUILD_DIR, the SLURM
# scripts find the executables through it (also through PATH alone), and unloading undoes it.
# Usage: lmod_module.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
fail() {
  echo "FAIL (lmod_module): $*"
  exit 1
}
init=/usr/share/lmod/lmod/init/bash
if [ ! -f "$init" ]; then
  echo "SKIPPED: Lmod is not installed ($init missing; env/install-debian.sh installs lmod)"
  exit 77
fi
set +u # Lmod's shell functions read unset variables
# shellcheck disable=SC1090
source "$init"
unset FNVLP_ROOT FNVLP_BUILD_DIR
module use "$src/env/modules"
FNVLP_BUILD_DIR=$build module load fnvlp
set -u
module list 2>&1 | grep -q 'fnvlp/0.1.0' || fail "fnvlp/0.1.0 not listed as loaded: $(module list 2>&1)"
[ "$FNVLP_ROOT" = "$src" ] || fail "FNVLP_ROOT is '$FNVLP_ROOT', expected $src"
[ "$FNVLP_BUILD_DIR" = "$build" ] || fail "FNVLP_BUILD_DIR is '$FNVLP_BUILD_DIR', expected $build"
for b in data_prep/fnvlp-shard jobs/fnvlp-pretrain jobs/fnvlp-finetune jobs/fnvlp-eval \
  analysis/fnvlp-simstat analysis/fnvlp-report; do
  got=$(command -v "$(basename "$b")") || fail "$(basename "$b") not on PATH after module load"
  [ "$got" = "$build/$b" ] || fail "$(basename "$b") resolves to $got, expected $build/$b"
done
fnvlp-pretrain --help >/dev/null || fail "fnvlp-pretrain --help failed through PATH"
echo "module load: FNVLP_ROOT, FNVLP_BUILD_DIR and 6 executables on PATH"

# The scripts, with the module's settings and with PATH alone (FNVLP_BUILD_DIR pointing nowhere).
pipeline_bins() {
  FNVLP_SCALE=smoke FNVLP_DRY_RUN=1 FNVLP_WORK=$(mktemp -d -u) FNVLP_SLURM_DIR=/nonexistent \
    bash "$FNVLP_ROOT/slurm/pipeline.sh" submit 2>&1
}
out=$(pipeline_bins) || fail "dry run of the pipeline failed with the module loaded: $out"
echo "$out" | grep -q -- '--job-name=fnvlp-eval' || fail "the dry run did not reach the eval stage: $out"
out=$(FNVLP_BUILD_DIR=/nonexistent pipeline_bins) || fail "the scripts did not find the executables through PATH: $out"
got=$(FNVLP_ROOT=$src FNVLP_BUILD_DIR=/nonexistent FNVLP_SCALE=smoke bash -c \
  'source "$FNVLP_ROOT/slurm/common.sh" && fnvlp_bin fnvlp-pretrain')
[ "$got" = "$build/jobs/fnvlp-pretrain" ] || fail "fnvlp_bin found '$got' through PATH"
echo "slurm scripts: every stage's executable found (module settings; PATH alone)"

set +u
module unload fnvlp
set -u
! command -v fnvlp-pretrain >/dev/null || fail "fnvlp-pretrain still on PATH after module unload"
[ -z "${FNVLP_ROOT:-}" ] || fail "FNVLP_ROOT still set after module unload"
echo "module unload: PATH and variables restored"
echo PASS
