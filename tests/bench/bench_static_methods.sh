#!/usr/bin/env bash
# Benchmark (issue 60): the static step (train.static_step, what CUDA graphs capture) against the
# eager step for every method, on the CPU: tiny preset, 2 ranks, synthetic data, 2 epochs (the
# grouped samplers group epoch 1), the two step modes of one method back to back and the methods'
# order rotated each round so machine noise hits them alike. The figure: samples/s, the median over
# the logged windows of epoch 1 (the grouped epoch), then the median over rounds; the ratio static /
# eager per method (goal: no method slower static than eager).
# Usage: tests/bench/bench_static_methods.sh [BUILD_DIR] [ROUNDS] [IMAGES]
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
# shellcheck source=tests/bench/methods_data.sh
source "$(dirname "${BASH_SOURCE[0]}")/methods_data.sh"
declare -A args=(
  [uniform]=""
  [glofnd]="--set negatives.method=glofnd"
  [fnc]="--set negatives.method=fnc"
  [srcl]="--set negatives.method=srcl"
  [tcl]="--set loss.tcl.enabled=true"
  [momentum]="--set loss.soft_targets=momentum --set loss.queue_size=4096"
  [grit]="--set sampler.kind=grit --set sampler.grit.q=1"
  [falcon]="--set sampler.kind=falcon"
  [falcon_glofnd]="--set sampler.kind=falcon --set negatives.method=glofnd")
order=(uniform glofnd fnc srcl tcl momentum grit falcon falcon_glofnd)
for r in $(seq 1 "$rounds"); do
  for m in "${order[@]}"; do
    for mode in eager static; do
      extra=()
      [ "$mode" = eager ] || extra=(--set train.static_step=true)
      # shellcheck disable=SC2086
      "${mpirun[@]}" "$build/jobs/fnvlp-pretrain" "${common[@]}" ${args[$m]} "${extra[@]}" \
        --out "$work/$m-$mode-$r" >"$work/$m-$mode-$r.log" 2>&1 ||
        { tail -5 "$work/$m-$mode-$r.log"; exit 1; }
      "$py" - "$work/$m-$mode-$r" "$m" "$mode" "$r" <<'PY'
import json, statistics, sys
run, m, mode, r = sys.argv[1:]
w = [json.loads(l) for l in open(run + "/metrics.jsonl")]
w = [x for x in w if "samples_per_s" in x and x["epoch"] == 1]
print(f"round {r} {m} {mode} {statistics.median(x['samples_per_s'] for x in w):.1f} {len(w)}")
PY
    done
  done
  order=("${order[@]:1}" "${order[0]}")
done | tee "$work/rounds.txt"
"$py" - "$work/rounds.txt" <<'PY'
import collections, statistics, sys
v = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, _, m, mode, sps, _ = line.split()
    v[(m, mode)].append(float(sps))
methods = list(dict.fromkeys(m for m, _ in v))
print("| method | eager samples/s | static samples/s | static / eager |")
print("|---|---|---|---|")
worst = None
for m in methods:
    e, s = statistics.median(v[(m, "eager")]), statistics.median(v[(m, "static")])
    worst = min(worst or s / e, s / e)
    print(f"| {m} | {e:.1f} | {s:.1f} | {s / e:.3f} |")
print(f"\nslowest static / eager: {worst:.3f} (goal >= 1: no method slower static)")
PY
