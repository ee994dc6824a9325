#!/usr/bin/env bash
# The static step (train.static_step: what train.cuda_graphs captures) on the CPU, at 1 and 2
# ranks (NP, the first argument after the usual three):
#  1. it computes the eager step: with ITM's argmax negatives (no draw: the two steps draw theirs
#     from different generators) the first step's losses within 1e-5 of the eager step's, the next
#     ones within 2e-3 (padded MLM rows and weighted ITM pairs sum in another order);
#  2. a non-finite loss on one rank (fault.nonfinite_step) skips the step on every rank from the
#     device flag alone: the weights after it are bitwise those of a run that stops before it, and
#     the step is counted in metrics.jsonl and summary.json;
#  3. non_finite.max_consecutive=1 ends the run at the log line that reads the skipped step, every
#     rank with the same message;
#  4. a stop at step 5 (SIGUSR1, checkpoint) resumed with --resume auto reproduces the
#     uninterrupted static run's losses bitwise;
#  5. the graph keys are agreed: every rank's log lists the same sequence of step shapes (MLM row
#     counts that differ between the ranks' own maskings), at least two of them;
#  6. what it cannot run is refused with exit 2 and the reason: train.cuda_graphs without a CUDA
#     device. (The methods in the static step: pretrain_static_methods.sh.)
set -euo pipefail
bin=$1 vocab=$2 src=$3 np=$4
# shellcheck source=tests/integration/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" static
mpirun=(mpirun --oversubscribe -np "$np")
synth_data "$work/synth" 120 5 8 3
shard_split "$work/synth" train "$work/shards" --shard-size 300
common=(--config "$src/jobs/configs/tiny.yaml" --data "$work/shards" --set train.batch_size=16
        --set train.log_every=1 --set optim.warmup_steps=3 --set checkpoint.every_steps=0
        --set train.deterministic=true --set train.export_embeddings=false
        --set loss.itm_negatives=argmax --set loss.mlm_probability=0.5)
run() {  # run NAME ARGS...
  local name=$1
  shift
  "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/$name" "$@" \
    >"$work/$name.txt" 2>&1 || { tail -20 "$work/$name.txt"; fail "run $name"; }
}

echo "== eager and static, 8 steps"
run eager --set train.max_steps=8
run static --set train.max_steps=8 --set train.static_step=true
grep -q "pretrain: static step" "$work/static.txt" || fail "the static run did not say so"

echo "== the ranks agree on the step's shapes"
shapes() { grep -o "static step shapes .*" "$1" | sed 's/^static step shapes //'; }
first=$(shapes "$work/static/logs/rank-0.log")
[ "$(printf '%s\n' "$first" | grep -c .)" -ge 2 ] || fail "fewer than two step shapes: $first"
for ((r = 1; r < np; r++)); do
  [ "$(shapes "$work/static/logs/rank-$r.log")" = "$first" ] || fail "rank $r's shapes differ"
done

echo "== a NaN at step 4 on the last rank, against a run that stops before it"
run nan --set train.max_steps=5 --set train.static_step=true --set fault.nonfinite_step=4 \
  --set fault.nonfinite_rank=$((np - 1))
run before --set train.max_steps=4 --set train.static_step=true
cmp "$work/nan/checkpoints/step-0000005/model.pt" "$work/before/checkpoints/step-0000004/model.pt" ||
  fail "the skipped step changed the weights"

echo "== max_consecutive 1: the skipped step ends the run"
set +e
timeout 300 "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/abort" \
  --set train.max_steps=8 --set train.static_step=true --set fault.nonfinite_step=2 \
  --set non_finite.max_consecutive=1 >"$work/abort.txt" 2>&1
rc=$?
set -e
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then tail -20 "$work/abort.txt"; fail "exit $rc"; fi
grep -q "non-finite loss for 1 consecutive steps (last: step 2" "$work/abort.txt" ||
  { tail -20 "$work/abort.txt"; fail "no divergence message"; }

echo "== stopped after step 5, resumed"
set +e
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/resumed" \
  --set train.max_steps=8 --set train.static_step=true --set fault.stop_step=5 \
  >"$work/stopped.txt" 2>&1
rc=$?
set -e
[ "$rc" -eq 3 ] || { tail -20 "$work/stopped.txt"; fail "the stopped run exited $rc, expected 3"; }
run resumed --set train.max_steps=8 --set train.static_step=true --resume auto

echo "== refusals"
# shellcheck disable=SC2043 # one refusal today; the loop takes more
for refused in "train.cuda_graphs=true:needs train.device=cuda"; do
  set +e
  timeout 300 "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/refused" \
    --set train.max_steps=2 --set train.static_step=true --set "${refused%%:*}" \
    >"$work/refused.txt" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || { tail -20 "$work/refused.txt"; fail "${refused%%:*}: exit $rc, expected 2"; }
  grep -q "${refused#*:}" "$work/refused.txt" || { tail "$work/refused.txt"; fail "no reason"; }
  rm -rf "$work/refused"
done

/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def metrics(run):
    return {r["step"]: r for r in map(json.loads, open(w + "/" + run + "/metrics.jsonl"))
            if "itc" in r}
eager, static = metrics("eager"), metrics("static")
assert sorted(eager) == sorted(static) == list(range(1, 9)), (sorted(eager), sorted(static))
worst = []
for s in sorted(eager):
    d = max(abs(eager[s][k] - static[s][k]) / max(abs(eager[s][k]), 1e-6)
            for k in ("itc", "itm", "mlm"))
    worst.append(d)
    assert d <= (1e-5 if s == 1 else 2e-3), ("step", s, eager[s], static[s], d)
nan = metrics("nan")
assert nan[5]["skipped_steps"] == 1 and nan[4]["skipped_steps"] == 0, nan
assert json.load(open(w + "/nan/summary.json"))["skipped_steps"] == 1
loss = lambda r: (r["itc"], r["itm"], r["mlm"])
resumed = metrics("resumed")
assert all(loss(resumed[s]) == loss(static[s]) for s in static), "the resumed static run differs"
print("static step: worst relative difference to the eager step per step "
      + " ".join("%.1e" % d for d in worst) + "; skip and resume exact")
PY
echo "PASS"
