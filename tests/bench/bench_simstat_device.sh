#!/usr/bin/env bash
# fnvlp-simstat on one GPU (issue 50; figures in tests/bench/README.md), the kokkos part of a lent
# GPU machine's run (tests/gpu/device_run.sh DIR kokkos), within 5 minutes on an H100/H200:
#   bash tests/bench/bench_simstat_device.sh SIMSTAT BENCH_SIMSTAT [PYTHON]
# SIMSTAT, BENCH_SIMSTAT: the programs of a build against Kokkos on CUDA (FNVLP_KOKKOS=cuda);
# PYTHON: one with the device's PyTorch and h5py (python3).
#  1. exactness, N = 16,384 (D): the whole job on the GPU against the host's generic path (--path
#     generic: the double sums the device path's results equal) on every core: STATS.h5 bit for bit
#     (stats_bits.py);
#  2. speed, N = 1,048,576, D = 256, alpha = 0.001 (about 1,000 negatives kept per anchor): the job
#     on the GPU, its image anchors' seconds against the fp32 GEMM floor 2 N^2 D / (torch.mm's
#     fp32 rate here, no TF32) (goal <= 2x) and against topk_thresholds_torch.py (torch.mm +
#     torch.topk by chunks, fp32: what a user writes; goal >= 1.5x), their thresholds compared, and
#     those of its fp64 variant (simstat's similarities) on the first 16,384 anchors bit for bit;
#     peak device memory: simstat's own buffers (its summary), nvidia-smi's peak during the job, and
#     PyTorch's.
# Env: N (1048576), D (256), ALPHA (0.001), EXACT_N (16384), BIG (1: also N = 4,194,304), WORK,
# STEP_TIMEOUT (seconds per step, 240).
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -uo pipefail
simstat=${1:?usage: bench_simstat_device.sh SIMSTAT BENCH_SIMSTAT [PYTHON]}
bench=${2:?usage: bench_simstat_device.sh SIMSTAT BENCH_SIMSTAT [PYTHON]}
py=${3:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
N=${N:-1048576} D=${D:-256} ALPHA=${ALPHA:-0.001} EXACT_N=${EXACT_N:-16384}
limit=${STEP_TIMEOUT:-240}
work=${WORK:-${TMPDIR:-/tmp}/fnvlp_bench_simstat_device}
mkdir -p "$work"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 HDF5_USE_FILE_LOCKING=FALSE
mpirun=(mpirun --oversubscribe --bind-to none)
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1), $(nproc --all) cores"
make_file() {  # N FILE
  [ -f "$2" ] || timeout "$limit" "$bench" --mode make --embeddings "$2" --pairs "$1" --dim "$D" >/dev/null
}
job() {  # LABEL FILE RANKS ARGS...: fnvlp-simstat, its log and summary in WORK
  local label=$1 file=$2 ranks=$3
  shift 3
  rm -f "$work/$label.h5"
  timeout "$limit" "${mpirun[@]}" -np "$ranks" "$simstat" --embeddings "$file" --out "$work/$label.h5" \
    --alpha "$ALPHA" --json "$work/$label.json" "$@" >"$work/$label.log" 2>&1 ||
    { echo "FAIL: $label (exit $?):"; tail -n 15 "$work/$label.log"; return 1; }
}
status=0

# 1. Exactness of the whole job: the GPU against the host's generic path.
small=$work/rand-$EXACT_N-$D.h5
make_file "$EXACT_N" "$small"
if job exact-gpu "$small" 1 && job exact-host "$small" "$(nproc --all)" --path generic; then
  "$py" "$here/stats_bits.py" "$work/exact-gpu.h5" "$work/exact-host.h5" || status=1
else
  status=1
fi

# 2. Speed at N: the job on the GPU with nvidia-smi's memory sampled, then PyTorch.
run_n() {  # N
  local n=$1 file=$work/rand-$1-$D.h5
  make_file "$n" "$file" || { echo "FAIL: making $file"; return 1; }
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$work/smi-$n.txt" &
  local smi=$!
  job "speed-$n" "$file" 1
  local rc=$?
  kill "$smi" 2>/dev/null
  [ "$rc" -eq 0 ] || return 1
  if ! { timeout "$limit" "$py" "$here/topk_thresholds_torch.py" --floor --dim "$D" >"$work/floor.json" &&
    timeout "$limit" "$py" "$here/topk_thresholds_torch.py" --embeddings "$file" --alpha "$ALPHA" \
      --out "$work/torch-$n.npy" --json "$work/torch-$n.json" >/dev/null &&
    timeout "$limit" "$py" "$here/topk_thresholds_torch.py" --embeddings "$file" --alpha "$ALPHA" \
      --precision fp64 --rows "$EXACT_N" --out "$work/torch64-$n.npy" >/dev/null; }; then
    echo "FAIL: topk_thresholds_torch.py at N=$n"
    return 1
  fi
  "$py" - "$work" "$n" "$D" <<'PY'
import json, sys
import h5py, numpy as np
w, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = json.load(open(f"{w}/speed-{n}.json"))
floor = json.load(open(f"{w}/floor.json"))
torch = json.load(open(f"{w}/torch-{n}.json"))
smi = [int(x) for x in open(f"{w}/smi-{n}.txt").read().split() if x.strip().isdigit()]
thr = h5py.File(f"{w}/speed-{n}.h5", "r")["threshold_image"][()]
t32, t64 = np.load(f"{w}/torch-{n}.npy"), np.load(f"{w}/torch64-{n}.npy")
same32 = np.mean(thr.view(np.uint32) == t32.view(np.uint32))
same64 = np.mean(thr[: len(t64)].view(np.uint32) == t64.view(np.uint32))
diff32 = float(np.max(np.abs(thr.astype(np.float64) - t32)))
img = s["image"]["seconds"]
gemm = 2.0 * n * n * d / (floor["fp32_tflops"] * 1e12)
print(f"N={n} D={d} alpha={s['alpha']} on {floor['gpu']} ({s['path']} path, {s['kokkos_space']}):")
print(f"  simstat image anchors {img:.2f} s (whole job, both modalities: {s['seconds']:.2f} s); "
      f"fp32 GEMM floor {gemm:.2f} s at {floor['fp32_tflops']:.1f} TFLOP/s: {img / gemm:.2f}x "
      f"the floor (goal <= 2x)")
print(f"  torch.mm + topk fp32 {torch['seconds']:.2f} s: simstat {torch['seconds'] / img:.2f}x "
      f"faster (goal >= 1.5x); thresholds bit-equal {same32:.4%}, max |diff| {diff32:.2e}; "
      f"fp64 torch on {len(t64)} anchors: bit-equal {same64:.4%}")
print(f"  device memory: simstat buffers {s['image']['device_buffer_bytes'] / 2**30:.2f} GiB, "
      f"nvidia-smi peak {max(smi) / 1024 if smi else float('nan'):.2f} GiB during the job; "
      f"torch peak {torch['peak_gib']:.2f} GiB; values recomputed exactly "
      f"{s['image']['scalar_path_values'] / (n * n):.2e} of all")
PY
}
run_n "$N" || status=1
if [ "${BIG:-0}" = 1 ]; then run_n 4194304 || status=1; fi
exit "$status"
