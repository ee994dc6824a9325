#!/usr/bin/env bash
# `sbatch slurm/pretrain_4m.sh` at smoke scale, chain shard -> pretrain (the stages built today):
#  1. no shards: the job submits shard -> pretrain (afterok) and ends; every job COMPLETED;
#  2. shards present: the job pretrains itself (no shard job), COMPLETED;
#  both runs complete their steps and the logs carry the git commit and the resolved settings.
set -euo pipefail
# shellcheck source=tests/integration/slurm/lib.sh
T_OWN_SHARDS=1 source "$(dirname "$0")/lib.sh" "$1" "$2" chain
export FNVLP_STAGES="shard pretrain"
mkdir -p "$FNVLP_LOGS"
cd "$FNVLP_ROOT"

echo "== 1: shards missing"
id=$(sbatch --parsable "${smoke_opts[@]}" --output="$FNVLP_LOGS/%x-%j.out" slurm/pretrain_4m.sh)
bash slurm/pipeline.sh wait --job "$id"
assert_chain_completed "$FNVLP_WORK/chain.tsv"
grep -q '^shard' "$FNVLP_WORK/chain.tsv" || fail "no shard job in the chain"
grep -q "git commit $(git rev-parse HEAD)" "$FNVLP_LOGS"/fnvlp-pretrain-*.out || fail "pretrain log lacks the git commit"
grep -q 'FNVLP_STEPS=24' "$FNVLP_LOGS"/fnvlp-pretrain-*.out || fail "pretrain log lacks the resolved settings"
grep -q 'launch: srun --mpi=pmix' "$FNVLP_LOGS"/fnvlp-pretrain-*.out || fail "ranks not launched with srun --mpi=pmix"

echo "== 2: shards present: the submitted job pretrains itself"
export FNVLP_RUN=$FNVLP_WORK/run2
id2=$(sbatch --parsable "${smoke_opts[@]}" --output="$FNVLP_LOGS/%x-%j.out" slurm/pretrain_4m.sh)
bash slurm/pipeline.sh wait --job "$id2"
assert_chain_completed "$FNVLP_WORK/chain.tsv"
grep -q '^shard' "$FNVLP_WORK/chain.tsv" && fail "shards were valid but a shard job was submitted"
grep -q "^pretrain	$id2\$" "$FNVLP_WORK/chain.tsv" || fail "job $id2 did not pretrain itself"

/usr/bin/python3 - "$FNVLP_WORK/run" "$FNVLP_RUN" <<'PY'
import json, sys
for run in sys.argv[1:]:
    s = json.load(open(run + "/summary.json"))
    assert s["status"] == "completed" and s["steps"] == 24, (run, s)
    rows = [json.loads(l) for l in open(run + "/metrics.jsonl")]
    assert any("val_r_mean" in r for r in rows), run + ": no validation record"
a = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
b = [json.loads(l) for l in open(sys.argv[2] + "/metrics.jsonl")]
key = lambda rows: [(r["step"], r.get("itc"), r.get("mlm")) for r in rows if "itc" in r]
assert key(a) == key(b), "two deterministic runs of the same job differ"
print("chain: both runs completed 24 steps, final ITC %.4f, identical" % key(a)[-1][1])
PY
echo PASS
