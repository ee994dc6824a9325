#!/usr/bin/env bash
# chain.tsv is published whole: while the stages are being submitted, a waiter sees either no
# chain.tsv or the previous complete one, never a chain with only its first jobs (it would wait for
# those and call the chain completed while later stages still run). sbatch is replaced by a
# recorder on PATH, so no cluster is needed.
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL (chain_record): $*"
  exit 1
}
mkdir -p "$tmp/bin"
# The fake sbatch checks what chain.tsv holds at each submission against T_SEEN_OK, a regex
# the whole file must match ('' = must not exist), and prints the next job id.
cat >"$tmp/bin/sbatch" <<'SB'
#!/usr/bin/env bash
f=$FNVLP_WORK/chain.tsv
if [ -z "$T_SEEN_OK" ]; then
  [ ! -e "$f" ] || { echo "chain.tsv exists mid-submission: $(tr '\t\n' ':;' <"$f")" >>"$T_ERRS"; }
else
  tr '\t\n' ':;' <"$f" | grep -qx "$T_SEEN_OK" ||
    echo "chain.tsv mid-submission: $(tr '\t\n' ':;' <"$f")" >>"$T_ERRS"
fi
n=$(($(cat "$T_IDS" 2>/dev/null || echo 100) + 1))
echo "$n" >"$T_IDS"
echo "$n"
SB
chmod +x "$tmp/bin/sbatch"
export PATH=$tmp/bin:$PATH T_ERRS=$tmp/errs T_IDS=$tmp/ids
export FNVLP_ROOT=$src FNVLP_WORK=$tmp/work FNVLP_SCALE=smoke FNVLP_SLURM_DIR=$tmp/none
# Executables are not needed: sbatch never runs them.
export FNVLP_SKIP_MISSING="fnvlp-shard fnvlp-synth fnvlp-pretrain fnvlp-simstat fnvlp-report fnvlp-finetune fnvlp-eval"
# shellcheck source=slurm/common.sh
source "$src/slurm/common.sh"
# shellcheck source=slurm/pipeline.sh
source "$src/slurm/pipeline.sh"

# 1. The whole chain from the login node: no chain.tsv until all six are submitted.
export T_SEEN_OK=""
SLURM_JOB_ID="" fnvlp_submit_chain >/dev/null 2>&1
[ ! -s "$T_ERRS" ] || fail "$(cat "$T_ERRS")"
want="entry:none;shard:101;pretrain:102;simstat:103;report:104;finetune:105;eval:106;"
got=$(tr '\t\n' ':;' <"$FNVLP_WORK/chain.tsv")
[ "$got" = "$want" ] || fail "chain.tsv is '$got', expected '$want'"
echo "submit: chain.tsv appeared whole ($got)"

# 2. pretrain_4m.sh's own job submits the rest: the previous chain stays until the new one is whole.
export T_SEEN_OK="$want"
SLURM_JOB_ID=200 fnvlp_submit_chain_after_pretrain 200 >/dev/null 2>&1
[ ! -s "$T_ERRS" ] || fail "$(cat "$T_ERRS")"
want="entry:200;pretrain:200;simstat:107;report:108;finetune:109;eval:110;"
got=$(tr '\t\n' ':;' <"$FNVLP_WORK/chain.tsv")
[ "$got" = "$want" ] || fail "chain.tsv is '$got', expected '$want'"
echo "after pretrain: chain.tsv replaced whole ($got)"
leftover=$(find "$FNVLP_WORK" -maxdepth 1 -name '.chain.tsv.*')
[ -z "$leftover" ] || fail "partial chain files left: $leftover"
echo PASS
