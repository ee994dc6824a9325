#!/usr/bin/env bash
# fnvlp-pretrain end to end on a small synthetic dataset at 2 ranks:
#  1. a run completes and leaves the run directory of ARCHITECTURE.md §9;
#  2. a run stopped at a step (injected SIGUSR1 on rank 0, and a real SIGUSR1 sent to mpirun)
#     checkpoints, exits with the requeue code 3, and resumed with --resume auto reproduces the
#     uninterrupted run's losses bitwise (deterministic mode);
#  3. a non-finite loss on one rank makes every rank skip that step, and it is counted;
#  4. SIGKILL of every rank while checkpoints are being written leaves a committed checkpoint
#     that --resume auto continues from, bitwise equal again;
#  5. an exception on one rank ends every rank non-zero, promptly (no hang);
#  6. SIGUSR2 exports the embeddings of every pair at that step and training goes on unchanged;
#  7. train.threads above the CPUs a rank may run on (its affinity mask) is warned about, naming
#     both numbers; within them it is not; fnvlp's own loops get the 2 threads either way (no
#     warning that they run on fewer).
set -euo pipefail
bin=$1 vocab=$2 src=$3
# shellcheck source=tests/integration/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" pretrain
synth_data "$work/synth" 240 5 8 3
shard_split "$work/synth" train "$work/shards" --shard-size 300
common=(--config "$src/jobs/configs/tiny.yaml" --data "$work/shards" --set train.batch_size=16
        --set train.max_steps=14 --set train.log_every=1 --set optim.warmup_steps=3
        --set checkpoint.every_steps=0 --set train.deterministic=true)

echo "== uninterrupted run"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/a"
for f in config.yaml metrics.jsonl summary.json logs/rank-0.log logs/rank-1.log checkpoints/latest/COMMITTED; do
  [ -e "$work/a/$f" ] || fail "run directory lacks $f"
done
ls "$work/a/embeddings/"epoch-*.h5 >/dev/null || fail "no embeddings exported"

echo "== injected stop after step 5, then resume"
set +e
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/b" --set fault.stop_step=5
rc=$?
set -e
[ "$rc" -eq 3 ] || fail "stopped run exited $rc, expected the requeue code 3"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/b" --resume auto

echo "== real SIGUSR1 to mpirun mid-run, then resume"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --set train.max_steps=40 --out "$work/c" &
pid=$!
wait_metrics_lines "$work/c" 3
kill -USR1 "$pid"
set +e
wait "$pid"
rc=$?
set -e
[ "$rc" -eq 3 ] || fail "signalled run exited $rc, expected 3"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --set train.max_steps=40 --out "$work/c" --resume auto
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --set train.max_steps=40 --out "$work/d"

echo "== embeddings on demand: SIGUSR2 (injected after step 5; real, to mpirun) exports and goes on"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/x" --set fault.export_step=5
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --set train.max_steps=40 --out "$work/y" &
pid=$!
wait_metrics_lines "$work/y" 3
kill -USR2 "$pid"
wait "$pid" || fail "run exported on SIGUSR2 exited $?"
[ "$(find "$work/y/embeddings" -maxdepth 1 -name 'step-*.h5' | wc -l)" -eq 1 ] || fail "SIGUSR2 did not export exactly once"

echo "== non-finite loss on rank 1 at step 4"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/e" \
  --set fault.nonfinite_step=4 --set fault.nonfinite_rank=1

echo "== SIGKILL of every rank mid-run (a checkpoint every step), then resume"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/f" --set checkpoint.every_steps=1 &
pid=$!
wait_metrics_lines "$work/f" 6
pkill -9 -f "fnvlp-pretrain.*$work/f" || true
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
ls -l "$work/f/checkpoints"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/f" --set checkpoint.every_steps=1 --resume auto

echo "== an exception on rank 1 at step 3 ends every rank"
t0=$(date +%s)
set +e
timeout 120 "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/g" \
  --set fault.throw_step=3 --set fault.throw_rank=1
rc=$?
set -e
elapsed=$(( $(date +%s) - t0 ))
[ "$rc" -ne 0 ] || fail "a rank failed but the job exited 0"
[ "$rc" -ne 124 ] || fail "the job hung after a rank failed"
[ "$elapsed" -lt 30 ] || fail "the job took ${elapsed}s to end after a rank failed"
grep -q "injected failure at step.throw event 3" "$work/g/logs/rank-1.log" || fail "rank 1's log lacks the failure"
echo "job ended with exit $rc in ${elapsed}s (start-up included)"

/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def metrics(run):
    rows = [json.loads(l) for l in open(w + "/" + run + "/metrics.jsonl")]
    steps = [r["step"] for r in rows]
    assert steps == sorted(set(steps)), run + ": duplicate or unordered steps " + str(steps)
    return {r["step"]: (r["itc"], r["itm"], r["mlm"]) for r in rows}
a, b = metrics("a"), metrics("b")
assert sorted(a) == list(range(1, 15)), sorted(a)
assert a == b, "resumed run differs: " + str([(s, a[s], b.get(s)) for s in a if a[s] != b.get(s)][:3])
c, d = metrics("c"), metrics("d")
assert c == d, "signal-resumed run differs: " + str([(s, c[s], d.get(s)) for s in d if c.get(s) != d[s]][:3])
# An on-demand export leaves the trajectory alone and writes every pair at that step.
import glob
import h5py, numpy as np
for run, ref in (("x", a), ("y", d)):
    x = metrics(run)
    assert x == ref, "exporting on demand changed the losses of run %s: %s" % (
        run, [(s, ref[s], x.get(s)) for s in ref if ref[s] != x.get(s)][:3])
n = h5py.File(glob.glob(w + "/a/embeddings/epoch-*.h5")[0])["pair_id"].shape[0]
for run, want in (("x", 5), ("y", None)):
    (path,) = glob.glob(w + "/" + run + "/embeddings/step-*.h5")
    with h5py.File(path) as e:
        step = int(e.attrs["step"])
        assert (want is None or step == want) and path.endswith("step-%07d.h5" % step), (path, step)
        assert (e["pair_id"][:] == np.arange(n)).all() and e["image_emb"].shape[0] == n, path
        assert np.isfinite(e["image_emb"][:]).all() and np.isfinite(e["text_emb"][:]).all(), path
f = metrics("f")
assert f == a, "run resumed after SIGKILL differs: " + str([(s, a[s], f.get(s)) for s in a if a[s] != f.get(s)][:3])
sa = json.load(open(w + "/a/summary.json"))
assert sa["status"] == "completed" and sa["steps"] == 14, sa
e = json.load(open(w + "/e/summary.json"))
assert e["skipped_steps"] == 1, e
first, last = a[1][0], a[14][0]
print("pretrain run: ITC %.4f -> %.4f over 14 steps; resumed runs bitwise equal" % (first, last))
PY

echo "== train.threads against the rank's affinity mask (one CPU, by taskset)"
cpu=$(python3 -c 'import os; print(min(os.sched_getaffinity(0)))')
for t in 2 1; do
  taskset -c "$cpu" mpirun --bind-to none -np 1 "$bin/jobs/fnvlp-pretrain" "${common[@]}" \
    --set train.max_steps=1 --set train.threads=$t --set train.export_embeddings=false \
    --out "$work/threads$t" >"$work/threads$t.txt" 2>&1 || { tail -5 "$work/threads$t.txt"; fail "run"; }
done
grep -q "train.threads is 2 but this process may run on 1 CPU" "$work/threads2.txt" ||
  fail "no warning for 2 threads on 1 CPU"
! grep -q "may run on" "$work/threads1.txt" || fail "a warning for 1 thread on 1 CPU"
! grep -q "fnvlp's own loops" "$work/threads2.txt" "$work/threads1.txt" ||
  fail "fnvlp's own loops do not run on train.threads threads"
echo "PASS"
