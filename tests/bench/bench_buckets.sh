#!/usr/bin/env bash
# The gradient all-reduce overlapped with the backward (issue 49): 2 nodes x 1 rank of the local
# two-node SLURM cluster (env/local-slurm.sh with FNVLP_SLURM_NODES=2: two network namespaces,
# Open MPI over TCP between them), the same pretraining with comm.bucket_mb 0 (one all-reduce after
# the backward) and 25 (buckets during it), side by side, several rounds alternating. Per run the
# medians over the logged windows after the first: the step time, the backward, and the wait on
# communication after it (phase_ms.comm); the share of the all-reduce hidden behind the backward is
# 1 - comm(25) / comm(0).
#
# Usage (root, CAP_NET_ADMIN): tests/bench/bench_buckets.sh BUILD_DIR [OUT]
# Environment: PRESET (small), STEPS (24), BATCH (8), ROUNDS (2), RATE (empty; e.g. 10gbit: a
# token-bucket rate limit (tc tbf; this kernel has no netem) on each node's link, the namespaces'
# own veth, to emulate a slower network).
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$(cd "$1" && pwd)
out=${2:-/tmp/fnvlp-bench-buckets}
preset=${PRESET:-small} steps=${STEPS:-24} batch=${BATCH:-8} rounds=${ROUNDS:-2}
source "$root/env/mpi-env.sh"
export FNVLP_SLURM_NODES=2 HDF5_USE_FILE_LOCKING=FALSE
ls=$root/env/local-slurm.sh
bash "$ls" start >/dev/null
trap 'bash "$ls" stop >/dev/null' EXIT
eval "$(bash "$ls" env)"
# Files the two nodes share must lie outside /tmp (each node namespace has its own).
work=$(mktemp -d /var/tmp/fnvlp-bench-buckets.XXXXXX)
mkdir -p "$out"
px=$(awk '/image_size:/ {print $2; exit}' "$root/jobs/configs/$preset.yaml")
vocab=${FNVLP_SHARED_DIR:-$root/../shared}/data/vocab/bert-base-uncased-vocab.txt
mpirun --oversubscribe -np 2 "$bin/data_prep/fnvlp-synth" --out "$work/synth" --images 320 \
  --captions-per-image 1 --classes 16 --image-size "$px" --seed 1 --val-fraction 0 >/dev/null
mpirun --oversubscribe -np 2 "$bin/data_prep/fnvlp-shard" --input "$work/synth/captions.json" \
  --image-root "$work/synth" --vocab "$vocab" --out "$work/shards" --image-size "$px" \
  --shard-size 160 >/dev/null
if [ -n "${RATE:-}" ]; then
  for n in 1 2; do
    dev=$(ip netns exec "fnvlp-n$n" ip -o link show | awk -F': ' '$2 != "lo" {print $2; exit}')
    ip netns exec "fnvlp-n$n" tc qdisc replace dev "${dev%@*}" root tbf rate "$RATE" burst 1mb latency 100ms
  done
fi
: >"$out/bench_buckets.jsonl"
for round in $(seq 1 "$rounds"); do
  for mb in 0 25; do
    run=$work/run-$mb-$round
    OMPI_MCA_btl=self,tcp srun --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --mpi=pmix \
      "$bin/jobs/fnvlp-pretrain" --config "$root/jobs/configs/$preset.yaml" --data "$work/shards" \
      --out "$run" --set train.batch_size="$batch" --set train.max_steps="$steps" \
      --set train.log_every=4 --set train.export_embeddings=false --set checkpoint.every_steps=0 \
      --set train.deterministic=true --set comm.bucket_mb="$mb" >"$run.txt" 2>&1 ||
      { tail -20 "$run.txt"; exit 1; }
    /usr/bin/python3 - "$run" "$mb" "$round" "${RATE:-}" >>"$out/bench_buckets.jsonl" <<'PY'
import json, statistics, sys
run, mb, rnd, rate = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [r for r in map(json.loads, open(run + "/metrics.jsonl")) if "phase_ms" in r][1:]
med = lambda k: statistics.median(r["phase_ms"][k] for r in rows)
step = statistics.median(sum(r["phase_ms"].values()) for r in rows)
print(json.dumps({"bucket_mb": mb, "round": rnd, "rate": rate or "veth", "step_ms": step,
                  "backward_ms": med("backward"), "comm_ms": med("comm"),
                  "samples_per_s": statistics.median(r["samples_per_s"] for r in rows),
                  "allreduce_bytes_per_step": rows[-1]["comm_bytes_per_step"]["allreduce"]}))
PY
    tail -n 1 "$out/bench_buckets.jsonl"
  done
done
/usr/bin/python3 - "$out/bench_buckets.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {mb: [r for r in rows if r["bucket_mb"] == mb] for mb in (0.0, 25.0)}
m = {mb: {k: statistics.median(r[k] for r in rs) for k in ("step_ms", "backward_ms", "comm_ms")}
     for mb, rs in by.items()}
print("| comm.bucket_mb | step ms | backward ms | comm wait after it ms |")
print("|---|---|---|---|")
for mb in (0.0, 25.0):
    print("| %g | %.1f | %.1f | %.1f |" % (mb, m[mb]["step_ms"], m[mb]["backward_ms"], m[mb]["comm_ms"]))
hidden = 1 - m[25.0]["comm_ms"] / m[0.0]["comm_ms"]
print("all-reduce hidden behind the backward: %.0f%%; step time 25 / 0: %.3f (%s, %d rounds)"
      % (100 * hidden, m[25.0]["step_ms"] / m[0.0]["step_ms"], rows[0]["rate"], len(by[0.0])))
PY
rm -rf "$work"
