#!/usr/bin/env bash
# Benchmark (issue 4): per-step cost of the false-negative methods, side by side in one run, the
# contenders alternating over ROUNDS rounds so machine noise hits them alike:
#   uniform vs GloFND        (goal: GloFND <= 2% overhead)
#   GRIT (q = 1) vs FALCON   (goal: FALCON <= 15% overhead; the paper reports about 28%)
# Each run: fnvlp-pretrain, tiny preset, 2 ranks, synthetic data, 2 epochs; the figure is the
# median samples/s over the logged windows of epoch 1 (the grouped epoch for GRIT/FALCON; the
# window holding the epoch-end export is excluded by taking the median).
# Then FALCON's reward pass against the step it follows, on the same shards, ranks and preset:
# bench_step --falcon-reward, time and BLAS FLOPs (tests/bench/gemm_flops.c preloaded): the FLOP
# ratio is the overhead the exact reward costs with every kernel as fast as the step's.
# Then the GloFND state memory per rank at N = 4,000,000 pairs and 8 ranks (bench_glofnd_memory).
# Usage: tests/bench/bench_methods.sh [BUILD_DIR] [ROUNDS] [IMAGES]
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
# shellcheck source=tests/bench/methods_data.sh
source "$(dirname "${BASH_SOURCE[0]}")/methods_data.sh"
declare -A args=(
  [uniform]=""
  [glofnd]="--set negatives.method=glofnd"
  [grit]="--set sampler.kind=grit --set sampler.grit.q=1"
  [falcon]="--set sampler.kind=falcon")
order=(uniform glofnd grit falcon)
for r in $(seq 1 "$rounds"); do
  for m in "${order[@]}"; do
    # shellcheck disable=SC2086
    "${mpirun[@]}" "$build/jobs/fnvlp-pretrain" "${common[@]}" ${args[$m]} \
      --out "$work/$m-$r" >"$work/$m-$r.log" 2>&1
    "$py" - "$work/$m-$r" "$m" "$r" <<'PY'
import json, statistics, sys
run, m, r = sys.argv[1:]
w = [json.loads(l) for l in open(run + "/metrics.jsonl")]
w = [x for x in w if "samples_per_s" in x and x["epoch"] == 1]
sps = statistics.median(x["samples_per_s"] for x in w)
ph = {k: statistics.median(x["phase_ms"][k] for x in w) for k in w[0]["phase_ms"]}
print(f"round {r} {m:8s} epoch-1 samples/s median {sps:7.1f} over {len(w)} windows; phase ms",
      " ".join(f"{k}={v:.2f}" for k, v in ph.items()))
PY
  done
  # Alternate the order every round.
  order=("${order[@]:1}" "${order[0]}")
done | tee "$work/rounds.txt"
"$py" - "$work/rounds.txt" <<'PY'
import collections, statistics, sys
v = collections.defaultdict(list)
ph = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    p = line.split()
    v[p[2]].append(float(p[6]))
    for kv in p[p.index("ms") + 1:]:
        k, x = kv.split("=")
        ph[p[2]][k].append(float(x))
med = {m: statistics.median(x) for m, x in v.items()}
pm = {m: {k: statistics.median(x) for k, x in d.items()} for m, d in ph.items()}
print("median over rounds (samples/s):", {m: round(x, 1) for m, x in med.items()})
print("median phase ms per step:", {m: {k: round(x, 2) for k, x in d.items()} for m, d in pm.items()})
print(f"GloFND step time / uniform: {med['uniform'] / med['glofnd']:.3f}  (goal <= 1.02)")
print(f"FALCON step time / GRIT:    {med['grit'] / med['falcon']:.3f}  (goal <= 1.15)")
# The same overheads from the phases, each method's own work against the rest of its step (both
# from the same runs, so machine noise between runs cancels): GloFND's update and filter (the
# negatives phase beyond uniform's), FALCON's reward pass and policy step plus its synchronous
# batch composition (beyond GRIT's, composed on the prefetch thread).
def own(m, base, keys):
    extra = sum(pm[m][k] - pm[base][k] for k in keys)
    total = sum(pm[m].values())
    return total / (total - extra)
print(f"GloFND from phases:         {own('glofnd', 'uniform', ['negatives']):.3f}")
print(f"FALCON from phases:         {own('falcon', 'grit', ['falcon', 'batch']):.3f}")
PY
cmake --build "$build" --target bench_step bench_glofnd_memory gemm_flops >/dev/null
"${mpirun[@]}" -x LD_PRELOAD="$build/tests/bench/gemm_flops.so" "$build/tests/bench/bench_step" \
  --config "$root/jobs/configs/tiny.yaml" --data "$work/shards" --steps 20 --warmup 3 \
  --falcon-reward | tee "$work/reward.json"
"$py" - "$work/reward.json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"FALCON reward pass / step: time {r['reward_over_step_median']:.3f} "
      f"(CPU {r['reward_over_step_cpu_median']:.3f}), BLAS FLOPs "
      f"{r['reward_gemm_gflop_median']:.2f} / {r['step_gemm_gflop_median']:.2f} GFLOP = "
      f"{r['reward_over_step_gemm_flops']:.3f}; the reward pass's BLAS time alone / step "
      f"{r['reward_blas_over_step']:.3f}")
PY
"$build/tests/bench/bench_glofnd_memory" 4000000 8
"$build/tests/bench/bench_glofnd_memory" 4000000 1
