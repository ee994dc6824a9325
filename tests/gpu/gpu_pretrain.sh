#!/usr/bin/env bash
# GPU checks of whole fnvlp-pretrain runs (label gpu): CASE BUILD_DIR VOCAB SOURCE_DIR.
#   no_cuda      train.device=cuda where no GPU is visible: exit 2 naming every rank (runs anywhere)
#   equivalence  every method, CPU vs CUDA from the same initial weights: step 1 within 1e-4,
#                the next steps within 2e-3 (relative; fp32, different kernels and reduction orders)
#   equivalence2 every method at 2 ranks, CPU (MPI) vs 2 GPUs (NCCL): step 1 within 1e-4, the next
#                within 2e-3; the NCCL run's bytes per step = tests/bench/comm_model.py's model
#   nccl_timeout a rank stalled at step 3 on 2 GPUs (NCCL, comm.timeout_s=10): the watch of the
#                collectives ends every rank, naming the collective and the rank, summary.json
#                failed (needs 2 GPUs, as equivalence2)
#   shared_gpu   2 ranks on one GPU with comm.backend=mpi (host-staged collectives) vs 2 CPU ranks;
#                comm.backend=auto there falls back to mpi and says so
#   bf16         CUDA bf16 vs CUDA fp32: step 1 within 3e-2, finite and learning over 30 steps
#   kill_resume  100 deterministic CUDA steps, SIGKILL at step 50, --resume auto: bitwise equal
#   graphs       the static step on CUDA against the eager step (ITM argmax: within 1e-4, then
#                2e-3) and against its CUDA graphs (train.cuda_graphs), fp32 and bf16: bitwise
#   graphs_resume  60 graphed steps, SIGKILL at step 30, --resume auto: bitwise equal
#   graphs_nan   a NaN at a replayed step: skipped on the device flag, the weights bitwise those
#                of a run that stops before it
#   graphs_methods  every method in the static step on CUDA against the eager step (ITM argmax:
#                within 1e-4, then 2e-3) and against its CUDA graphs (bitwise), four arms that
#                cover them (FALCON + GloFND, GRIT + FNC + TCL, momentum, SRCL), 3 steps into
#                the grouped epoch; FALCON's reward under dropout 0.1 and lr 0 exactly 0 with
#                graphs (its reward pass, a graph of its own, repeats the step's masks)
#   graphs_shared  2 ranks on one GPU over MPI (the collectives from the graph's host nodes):
#                CUDA graphs bitwise equal to the static step without them (FALCON + GloFND)
#   graphs_nccl2 2 GPUs over NCCL with the collectives captured: CUDA graphs bitwise equal to the
#                static step without them (FALCON + GloFND), and the same bytes per step
#   sdpa         train.attention=sdpa (fused kernels) against materialised scores, fp32 (1e-4,
#                then 2e-3) and bf16 (3e-2), train.deterministic=false
#   norm_kernel  train.norm_kernel=fnvlp (the fused residual add + LayerNorm) against aten: fp32
#                within 1e-4 at step 1, then 2e-3; bf16 within 3e-2; bf16 with CUDA graphs
#                bitwise equal to its static step without them
#   oom          CUDA's out-of-memory error at step 3 (FNVLP_FAULT step.oom: an allocation larger
#                than the GPU): exit 1, summary.json naming the phase, the batch size, the device
#                memory in use and in total, and a hint with bf16 (tests/fault/out_of_memory.sh is
#                the same on the CPU)
#   profile      train.profile_steps: a Chrome trace of the profiled steps (their kernels on a
#                GPU) that tests/bench/trace_summary.py reads; on a GPU, a 1-rank step waits for
#                it at most 5 times; with libtorch 1.13 a usage error (runs anywhere: on the GPU
#                when there is one, else on the CPU)
# Without a usable GPU the GPU cases print "SKIPPED: <why>" and exit 77 (ctest: Skipped).
set -euo pipefail
case_=$1 bin=$2 vocab=$3 src=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_gpu.XXXXXX")
trap 'rm -rf "$work"' EXIT
export HDF5_USE_FILE_LOCKING=FALSE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=${FNVLP_PYTHON:-python3}
fail() { echo "FAIL: $*"; exit 1; }
mpirun1=(mpirun --oversubscribe -np 1)
mpirun2=(mpirun --oversubscribe -np 2)

make_data() {  # 32 images x 5 captions at 64 px: 140 training pairs, 8 steps of 16 per epoch
  "${mpirun2[@]}" "$bin/data_prep/fnvlp-synth" --out "$work/synth" --images 32 \
    --captions-per-image 5 --classes 4 --image-size 64 --seed 3 --val-fraction 0.1 >/dev/null
  "${mpirun2[@]}" "$bin/data_prep/fnvlp-shard" --input "$work/synth/captions.json" \
    --image-root "$work/synth" --split-file "$work/synth/splits.json" --split train \
    --vocab "$vocab" --out "$work/shards" --image-size 64 --shard-size 100 >/dev/null
}
common=(--data "$work/shards" --config "$src/jobs/configs/tiny.yaml" --set train.batch_size=16
        --set train.log_every=1 --set optim.warmup_steps=2 --set train.deterministic=true
        --set train.export_embeddings=false --set watchdog.timeout_s=300)
run() {  # run NAME NP ARGS...: one pretraining run, its output in $work/NAME.txt
  local name=$1 np=$2
  shift 2
  mpirun --oversubscribe -np "$np" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/$name" \
    "$@" >"$work/$name.txt" 2>&1 || { tail -25 "$work/$name.txt"; fail "run $name"; }
}
need_gpus() {  # need_gpus N: N GPUs on this node (NCCL: one per rank), else SKIPPED
  need_gpu
  local n
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ "$n" -lt "$1" ]; then
    echo "SKIPPED: gpu.$case_: needs $1 GPUs on one node (one per NCCL rank), $(hostname) has $n"
    exit 77
  fi
}
# links PATTERN: fnvlp-pretrain links a library matching PATTERN. grep reads all of ldd's output:
# with -q it would stop at the first match, ldd would die of SIGPIPE, and pipefail would make a
# match a miss.
links() { ldd "$bin/jobs/fnvlp-pretrain" | grep -- "$1" >/dev/null; }
need_gpu() {
  local why=""
  if ! links libtorch_cuda; then
    why="this build has no CUDA (FNVLP_GPU=1 env/build.sh builds one)"
  elif ! out=$(CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-} nvidia-smi -L 2>&1) || [ -z "$out" ]; then
    why="no CUDA device on $(hostname) (nvidia-smi: ${out:-none})"
  fi
  if [ -n "$why" ]; then
    echo "SKIPPED: gpu.$case_: $why"
    exit 77
  fi
}
# compare A B STEP1_TOL LATER_TOL: per-step itc/itm/mlm of two runs, relative differences.
compare() {
  "$py" - "$work/$1" "$work/$2" "$3" "$4" <<'PY'
import json, sys
def rows(run):
    return {r["step"]: r for r in map(json.loads, open(run + "/metrics.jsonl")) if "itc" in r}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
tol1, tol = float(sys.argv[3]), float(sys.argv[4])
assert sorted(a) == sorted(b) and a, ("steps differ", sorted(a), sorted(b))
worst = {}
for s in sorted(a):
    for k in ("itc", "itm", "mlm"):
        d = abs(a[s][k] - b[s][k]) / max(abs(a[s][k]), 1e-6)
        worst[s] = max(worst.get(s, 0), d)
        assert d <= (tol1 if s == min(a) else tol), (
            "step %d %s: %r vs %r (relative %.2e)" % (s, k, a[s][k], b[s][k], d))
print("  %s vs %s: %d steps, worst relative difference per step %s" % (
    sys.argv[1].rsplit("/", 1)[1], sys.argv[2].rsplit("/", 1)[1], len(a),
    " ".join("%.1e" % worst[s] for s in sorted(worst))))
PY
}
expect() { grep -qE -- "$1" "$2" || { tail -20 "$2"; fail "$2 lacks /$1/"; }; }

# Every method, as NAME:OVERRIDES, for the equivalence cases (CPU against CUDA / NCCL).
methods=("uniform:" "glofnd:--set negatives.method=glofnd --set negatives.alpha=0.05"
  "fnc:--set negatives.method=fnc --set negatives.alpha=0.05"
  "srcl:--set negatives.method=srcl" "tcl:--set loss.tcl.enabled=true"
  "momentum:--set loss.soft_targets=momentum --set loss.queue_size=64"
  "grit:--set sampler.kind=grit --set sampler.grit.q=1 --set train.export_embeddings=true"
  "falcon:--set sampler.kind=falcon --set train.export_embeddings=true")

# The static step's arms as NAME:OVERRIDES (graphs_*): every method among them.
arms=("falcon_glofnd:--set sampler.kind=falcon --set negatives.method=glofnd --set negatives.alpha=0.05 --set negatives.glofnd.init=0.5 --set negatives.glofnd.lr=0.3 --set train.export_embeddings=true"
  "grit_fnc_tcl:--set sampler.kind=grit --set sampler.grit.schedule=hardening --set negatives.method=fnc --set negatives.alpha=0.05 --set loss.tcl.enabled=true --set train.export_embeddings=true"
  "momentum:--set loss.soft_targets=momentum --set loss.queue_size=40"
  "srcl:--set negatives.method=srcl" "oracle:--set negatives.method=oracle"
  "glofnd_epoch:--set negatives.method=glofnd --set negatives.alpha=0.05 --set negatives.glofnd.init=0.5 --set negatives.glofnd.lr=0.3 --set negatives.glofnd.bias_correction=epoch")
# static_vs_graphs NP STEPS ARGS...: per arm, the static step without and with CUDA graphs,
# bitwise (deterministic), at NP ranks.
static_vs_graphs() {
  local np=$1 steps=$2
  shift 2
  for a in "${arms[@]}"; do
    local name=${a%%:*}
    read -r -a extra <<<"${a#*:}"
    run "$name-static" "$np" --set train.max_steps="$steps" --set train.device=cuda \
      --set loss.itm_negatives=argmax --set train.static_step=true "${extra[@]}" "$@"
    run "$name-graphs" "$np" --set train.max_steps="$steps" --set train.device=cuda \
      --set loss.itm_negatives=argmax --set train.cuda_graphs=true "${extra[@]}" "$@"
    expect "cuda_graphs: captured the step" "$work/$name-graphs.txt"
    compare "$name-static" "$name-graphs" 0 0
  done
}

case $case_ in
no_cuda)
  make_data
  set +e
  CUDA_VISIBLE_DEVICES="" timeout 300 "${mpirun2[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" \
    --out "$work/a" --set train.max_steps=2 --set train.device=cuda >"$work/a.txt" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || { tail -20 "$work/a.txt"; fail "exit $rc, expected 2"; }
  for r in 0 1; do expect "train.device=cuda but rank $r on .* sees no CUDA device" "$work/a.txt"; done
  echo "  exit 2, both ranks named"
  ;;
equivalence)
  need_gpu
  make_data
  for m in "${methods[@]}"; do
    name=${m%%:*}
    read -r -a extra <<<"${m#*:}"
    # grit/falcon group batches from epoch 1: 8 uniform steps, then 3 grouped ones.
    steps=5
    case $name in grit | falcon) steps=11 ;; esac
    run "$name-cpu" 1 --set train.max_steps=$steps --set train.device=cpu "${extra[@]}"
    run "$name-cuda" 1 --set train.max_steps=$steps --set train.device=cuda "${extra[@]}"
    expect "device cuda:0" "$work/$name-cuda.txt"
    compare "$name-cpu" "$name-cuda" 1e-4 2e-3
  done
  ;;
equivalence2)
  need_gpus 2
  make_data
  for m in "${methods[@]}"; do
    name=${m%%:*}
    read -r -a extra <<<"${m#*:}"
    steps=5
    case $name in grit | falcon) steps=7 ;; esac  # 4 uniform steps per epoch at 2 x 16
    run "$name-cpu" 2 --set train.max_steps=$steps --set train.device=cpu "${extra[@]}"
    run "$name-nccl" 2 --set train.max_steps=$steps --set train.device=cuda \
      --set comm.backend=nccl "${extra[@]}"
    expect "device collectives nccl" "$work/$name-nccl.txt"
    compare "$name-cpu" "$name-nccl" 1e-4 2e-3
  done
  "$py" "$src/tests/bench/comm_model.py" check "$work/uniform-nccl/metrics.jsonl" \
    "$src/jobs/configs/tiny.yaml" 2 16 --backend nccl
  ;;
nccl_timeout)
  need_gpus 2
  make_data
  set +e
  t0=$(date +%s)
  FNVLP_FAULT="step.sleep:3:1:600" timeout 300 "${mpirun2[@]}" "$bin/jobs/fnvlp-pretrain" \
    "${common[@]}" --out "$work/a" --set train.max_steps=8 --set train.device=cuda \
    --set comm.backend=nccl --set comm.timeout_s=10 >"$work/a.txt" 2>&1
  rc=$?
  set -e
  elapsed=$(($(date +%s) - t0))
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then tail -20 "$work/a.txt"; fail "exit $rc"; fi
  expect "NCCL rank 0/2 \(cuda:[0-9]+\) [a-z_]+.*not done after 10 s" "$work/a.txt"
  "$py" - "$work/a" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["status"] == "failed" and "not done after 10 s" in s["error"], s
PY
  echo "  rank 1 stalled: the job ended in ${elapsed}s (start-up included), naming the collective"
  ;;
shared_gpu)
  need_gpu
  make_data
  run cpu2 2 --set train.max_steps=6 --set train.device=cpu --set negatives.method=glofnd
  run cuda2 2 --set train.max_steps=6 --set train.device=cuda --set comm.backend=mpi \
    --set negatives.method=glofnd
  expect "device collectives mpi \(host copies\)" "$work/cuda2.txt"
  compare cpu2 cuda2 1e-4 2e-3
  # comm.backend=auto with the two ranks on one GPU: MPI, said once, rather than NCCL's refusal.
  CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} run auto2 2 --set train.max_steps=2 \
    --set train.device=cuda
  expect "comm.backend=auto: ranks of a node share a GPU .* -> mpi" "$work/auto2.txt"
  ;;
bf16)
  need_gpu
  make_data
  run fp32 1 --set train.max_steps=30 --set train.device=cuda
  run bf16 1 --set train.max_steps=30 --set train.device=cuda --set train.precision=bf16
  compare fp32 bf16 3e-2 1
  "$py" - "$work/bf16" <<'PY'
import json, math, sys
r = [x for x in map(json.loads, open(sys.argv[1] + "/metrics.jsonl")) if "itc" in x]
assert all(math.isfinite(x["loss"]) for x in r), "non-finite bf16 loss"
first, last = sum(x["loss"] for x in r[:5]) / 5, sum(x["loss"] for x in r[-5:]) / 5
assert last < first, ("bf16 loss did not fall", first, last)
print("  bf16: loss %.4f -> %.4f over %d steps" % (first, last, len(r)))
PY
  ;;
kill_resume)
  need_gpu
  make_data
  run ref 1 --set train.max_steps=100 --set train.device=cuda --set checkpoint.every_steps=0
  set +e
  FNVLP_FAULT="step.kill:50:0" timeout 600 "${mpirun1[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" \
    --out "$work/a" --set train.max_steps=100 --set train.device=cuda \
    --set checkpoint.every_steps=10 >"$work/a-killed.txt" 2>&1
  rc=$?
  set -e
  [ "$rc" -ne 0 ] || fail "the killed run succeeded"
  run a 1 --set train.max_steps=100 --set train.device=cuda --set checkpoint.every_steps=10 \
    --resume auto
  expect "resumed from .*step-0000050 \(step 50," "$work/a.txt"
  compare ref a 0 0
  echo "  bitwise equal after the resume at step 50"
  ;;
graphs)
  need_gpu
  make_data
  g=(--set train.max_steps=12 --set train.device=cuda --set loss.itm_negatives=argmax)
  run eager 1 "${g[@]}"
  run static 1 "${g[@]}" --set train.static_step=true
  run graphs 1 "${g[@]}" --set train.cuda_graphs=true
  expect "cuda_graphs: captured the step" "$work/graphs.txt"
  compare eager static 1e-4 2e-3
  compare static graphs 0 0
  run static16 1 "${g[@]}" --set train.static_step=true --set train.precision=bf16
  run graphs16 1 "${g[@]}" --set train.cuda_graphs=true --set train.precision=bf16
  compare static16 graphs16 0 0
  echo "  graph replays bitwise equal to the eager static step, fp32 and bf16"
  ;;
graphs_resume)
  need_gpu
  make_data
  g=(--set train.max_steps=60 --set train.device=cuda --set train.cuda_graphs=true)
  run ref 1 "${g[@]}"
  set +e
  FNVLP_FAULT="step.kill:30:0" timeout 600 "${mpirun1[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" \
    --out "$work/a" "${g[@]}" --set checkpoint.every_steps=10 >"$work/a-killed.txt" 2>&1
  rc=$?
  set -e
  [ "$rc" -ne 0 ] || fail "the killed run succeeded"
  run a 1 "${g[@]}" --set checkpoint.every_steps=10 --resume auto
  expect "resumed from .*step-0000030 \(step 30," "$work/a.txt"
  compare ref a 0 0
  echo "  bitwise equal after the resume at step 30, CUDA graphs on"
  ;;
graphs_nan)
  need_gpu
  make_data
  # The learning rate of steps 0-5 does not depend on max_steps (warm-up 0-4, step 5 at the
  # cosine's start), so the two runs agree up to step 5. Without MLM every step has one shape:
  # step 0 creates AdamW's state, step 1 is the warm-up, steps 2-6 are replays (the NaN's too).
  g=(--set train.device=cuda --set train.cuda_graphs=true --set checkpoint.every_steps=0
     --set optim.warmup_steps=5 --set loss.mlm_weight=0)
  run nan 1 "${g[@]}" --set train.max_steps=7 --set fault.nonfinite_step=6
  run before 1 "${g[@]}" --set train.max_steps=6
  cmp "$work/nan/checkpoints/step-0000007/model.pt" \
    "$work/before/checkpoints/step-0000006/model.pt" || fail "the skipped step changed the weights"
  "$py" - "$work/nan" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["skipped_steps"] == 1, s
assert s["cuda_graphs"] == {"captured": 1, "replays": 5, "warmup_steps": 1}, s["cuda_graphs"]
PY
  echo "  a NaN at a replayed step: skipped, weights unchanged"
  ;;
graphs_methods)
  need_gpu
  make_data
  for a in "${arms[@]}"; do
    name=${a%%:*}
    read -r -a extra <<<"${a#*:}"
    run "$name-eager" 1 --set train.max_steps=11 --set train.device=cuda \
      --set loss.itm_negatives=argmax "${extra[@]}"
    run "$name-static" 1 --set train.max_steps=11 --set train.device=cuda \
      --set loss.itm_negatives=argmax --set train.static_step=true "${extra[@]}"
    compare "$name-eager" "$name-static" 1e-4 2e-3
  done
  static_vs_graphs 1 11
  run falcon_dropout 1 --set train.max_steps=11 --set train.device=cuda --set train.cuda_graphs=true \
    --set sampler.kind=falcon --set train.export_embeddings=true --set model.dropout=0.1 \
    --set optim.lr=0 --set optim.min_lr=0
  expect "cuda_graphs: captured the pass after the update" "$work/falcon_dropout.txt"
  "$py" - "$work/falcon_dropout" <<'PY'
import json, sys
r = [x["falcon_reward"] for x in map(json.loads, open(sys.argv[1] + "/metrics.jsonl"))
     if "itc" in x and x["epoch"] >= 1]
assert r and all(v == 0 for v in r), r
print("  FALCON's reward with graphs, dropout 0.1, lr 0: %d steps of exactly 0" % len(r))
PY
  ;;
graphs_shared)
  need_gpu
  make_data
  arms=("${arms[0]}")
  static_vs_graphs 2 7 --set comm.backend=mpi
  expect "device collectives mpi \(host copies\)" "$work/falcon_glofnd-graphs.txt"
  ;;
graphs_nccl2)
  need_gpus 2
  make_data
  arms=("${arms[0]}")
  static_vs_graphs 2 7 --set comm.backend=nccl
  expect "device collectives nccl" "$work/falcon_glofnd-graphs.txt"
  "$py" - "$work/falcon_glofnd-static" "$work/falcon_glofnd-graphs" <<'PY'
import json, sys
def sent(run):
    return [r["comm_bytes_per_step"] for r in map(json.loads, open(run + "/metrics.jsonl"))
            if "comm_bytes_per_step" in r]
a, b = sent(sys.argv[1]), sent(sys.argv[2])
assert a == b, ("the replays' bytes per step differ from the static step's", a, b)
print("  bytes per step with graphs = without: %s" % b[-1])
PY
  ;;
sdpa)
  need_gpu
  make_data
  a=(--set train.max_steps=8 --set train.device=cuda --set train.deterministic=false
    --set loss.itm_negatives=argmax --set model.dropout=0)
  run mat 1 "${a[@]}" --set train.attention=materialised
  run sdpa 1 "${a[@]}" --set train.attention=sdpa
  compare mat sdpa 1e-4 2e-3
  run mat16 1 "${a[@]}" --set train.attention=materialised --set train.precision=bf16
  run sdpa16 1 "${a[@]}" --set train.attention=sdpa --set train.precision=bf16
  compare mat16 sdpa16 3e-2 1
  ;;
norm_kernel)
  need_gpu
  make_data
  a=(--set train.max_steps=8 --set train.device=cuda --set loss.itm_negatives=argmax)
  run aten 1 "${a[@]}" --set train.norm_kernel=aten
  run fused 1 "${a[@]}" --set train.norm_kernel=fnvlp
  expect "add \+ LayerNorm fnvlp" "$work/fused.txt"
  compare aten fused 1e-4 2e-3
  a+=(--set train.precision=bf16)
  run aten16 1 "${a[@]}" --set train.norm_kernel=aten
  run fused16 1 "${a[@]}" --set train.norm_kernel=fnvlp --set train.static_step=true
  compare aten16 fused16 3e-2 1
  run fused16g 1 "${a[@]}" --set train.norm_kernel=fnvlp --set train.cuda_graphs=true
  compare fused16 fused16g 0 0
  ;;
oom)
  need_gpu
  make_data
  set +e
  FNVLP_FAULT="step.oom:3:0" timeout 300 "${mpirun1[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" \
    --out "$work/a" --set train.max_steps=10 --set train.device=cuda >"$work/a.txt" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 1 ] || { tail -20 "$work/a.txt"; fail "exit $rc, expected 1"; }
  expect "CUDA out of memory on rank 0 \(cuda:0\) in phase 'step' at step 3 with train.batch_size 16: device memory" "$work/a.txt"
  "$py" - "$work/a/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
o = s["out_of_memory"]
assert s["status"] == "failed" and s["exit_code"] == 1 and s["phase"] == "step", s
assert o["device"] == "cuda:0" and o["batch_size"] == 16 and o["step"] == 3, o
assert 0 < o["memory_in_use_bytes"] <= o["memory_total_bytes"] and o["memory_peak_bytes"] > 0, o
assert "train.precision=bf16" in o["hint"] and "CUDA out of memory" in s["error"], s
print("  %s" % s["error"][:300])
PY
  ;;
profile)
  make_data
  dev=cuda
  links libtorch_cuda && nvidia-smi -L >/dev/null 2>&1 || dev=cpu
  # 2 ranks: only rank 0 writes. On one GPU they share it through MPI (NCCL refuses that).
  prof=(--set train.max_steps=5 --set "train.device=$dev" --set comm.backend=mpi
    --set train.profile_start=2 --set train.profile_steps=2)
  if links 'libtorch_cpu.so.1\.'; then  # Debian's 1.13
    set +e
    timeout 300 "${mpirun1[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/a" \
      "${prof[@]}" >"$work/a.txt" 2>&1
    rc=$?
    set -e
    [ "$rc" -eq 2 ] || { tail -20 "$work/a.txt"; fail "exit $rc, expected 2"; }
    expect "train.profile_steps needs libtorch 2.x" "$work/a.txt"
    echo "  libtorch 1.13: exit 2 with the reason"
  else
    run a 2 "${prof[@]}"
    expect "profiling steps 2 to 3" "$work/a.txt"
    [ -s "$work/a/profile/trace-rank0.json" ] || fail "no trace of rank 0"
    [ ! -e "$work/a/profile/trace-rank1.json" ] || fail "rank 1 wrote a trace"
    "$py" "$src/tests/bench/trace_summary.py" "$work/a/profile/trace-rank0.json" --steps 2 \
      --json "$work/s.json" >"$work/s.txt"
    sed -n 1,4p "$work/s.txt"
    "$py" - "$work/s.json" "$dev" <<'PY'
import json, sys
s, dev = json.load(open(sys.argv[1])), sys.argv[2]
names = {r["name"] for r in s["top_level_ops"]}
assert s["ops_per_step"] > 100, s["ops_per_step"]  # a step of the tiny model, not an empty trace
assert any("backward" in n.lower() for n in names), sorted(names)
if dev == "cuda":
    assert s["kernels_per_step"] > 100 and 0 <= s["gpu_idle"] < 1, s
print("  %s: %.0f host ops per profiled step" % (dev, s["ops_per_step"]))
PY
    if [ "$dev" = cuda ]; then
      # One rank (no host collectives), as benchmarked: the step reads back its ITM similarities
      # and its losses, once each; the masks, pairs and ids it indexes with are built on the
      # host. The bound leaves room for the profiler's own wait and a log step's reads (the step
      # waited 30 times before).
      run b 1 "${prof[@]}" --set train.deterministic=false
      "$py" "$src/tests/bench/trace_summary.py" "$work/b/profile/trace-rank0.json" --steps 2 \
        --json "$work/b.json" >/dev/null
      "$py" - "$work/b.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print("  cuda, 1 rank: %.1f host waits and %.1f copies to the host per step"
      % (s["syncs_per_step"], s["copies_to_host_per_step"]))
assert s["syncs_per_step"] <= 5, "the host waits for the GPU %.1f times per step" % s["syncs_per_step"]
PY
    else
      echo "  host waits per step not counted: no GPU (the 1-rank check runs on a GPU)"
    fi
  fi
  ;;
*) fail "unknown case $case_" ;;
esac
echo "PASS: gpu.$case_"
