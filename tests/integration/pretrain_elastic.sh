#!/usr/bin/env bash
# Elastic resume (GloFND on the uniform sampler, tiny preset, batch 16 per rank): a run stopped
# mid-epoch 0 at R ranks resumes at R' ranks (2 -> 1, 1 -> 2, 2 -> 4) and trains on across epoch
# boundaries to its end (>= 30 steps after the resume). Each case runs twice from a copy of the
# stopped run: once to its end (A), once stopped at the last step of epoch 0 (B) to read the
# per-pair state there. Checked:
#   - epoch 0 is completed, not restarted: at its end every pair was drawn at most once (GloFND's
#     per-pair update count is 0 or 1 on both sides), the pairs drawn number exactly the steps
#     before the stop x 16 x R plus the steps after it x 16 x R' (the pairs epoch 0 had planned
#     and not drawn by the stop, as far as the smallest new block's share of them allows);
#   - per-pair state moved to the new owners: every pair drawn before the stop has, at the end of
#     epoch 0, the λ, Adam moments and count it had in the stopped run's checkpoint, bitwise (it
#     was not updated again in that epoch). Pairs drawn after the resume are not compared: their
#     negatives are another global batch than the uninterrupted run's, so their λ differ;
#   - the learning rate of every step of both runs is the schedule as a function of the samples
#     seen (warm-up and cosine in steps of the first launch's global batch, 16 x R);
#   - the run ends where its epochs end at R' ranks, and says that epoch 0 continued.
# And GRIT's grouped sampler (with GloFND) across two rank changes, FALCON across one (below).
set -euo pipefail
bin=$1 vocab=$2 src=$3
py=/usr/bin/python3
# shellcheck source=tests/integration/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" elastic
synth_data "$work/synth" 120 5 8 5
shard_split "$work/synth" train "$work/shards" --shard-size 300
common=(--config "$src/jobs/configs/tiny.yaml" --data "$work/shards" --set train.batch_size=16
        --set train.log_every=1 --set optim.warmup_steps=4 --set checkpoint.every_steps=0
        --set train.export_embeddings=false)
glofnd=(--set negatives.method=glofnd --set negatives.alpha=0.05 --set negatives.glofnd.init=0.5
        --set negatives.glofnd.lr=0.3)
stop=10
pretrain() {  # pretrain NP OUT ARGS...: prints the exit status, 0 (completed) or 3 (stopped)
  local np=$1 out=$2 rc=0
  shift 2
  mpirun --oversubscribe -np "$np" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$out" "$@" \
    >"$out.log" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || { cat "$out.log" >&2; echo "FAIL: $out exited $rc" >&2; }
  echo "$rc"
}

# case FROM TO EPOCHS
case_() {
  local from=$1 to=$2 epochs=$3 name="r$1to$2"
  echo "== $from -> $to ranks, $epochs epochs, stopped at step $stop"
  mkdir -p "$work/$name"
  [ "$(pretrain "$from" "$work/$name/stopped" "${glofnd[@]}" --set train.epochs="$epochs" \
        --set fault.stop_step=$stop)" = 3 ] || fail "the $from-rank run did not stop at step $stop"
  cp -a "$work/$name/stopped" "$work/$name/a"
  cp -a "$work/$name/stopped" "$work/$name/b"
  [ "$(pretrain "$to" "$work/$name/a" "${glofnd[@]}" --set train.epochs="$epochs" --resume auto)" = 0 ] ||
    fail "$name: the resumed run did not complete"
  grep -q "continues on $to ranks" "$work/$name/a.log" || fail "$name: no line saying epoch 0 continued"
  # The last step of epoch 0 in run A: B stops there.
  local end0
  end0=$("$py" -c "import json,sys; print(max(r['step'] for r in map(json.loads, open(sys.argv[1])) if 'itc' in r and r['epoch'] == 0))" "$work/$name/a/metrics.jsonl")
  [ "$(pretrain "$to" "$work/$name/b" "${glofnd[@]}" --set train.epochs="$epochs" --set fault.stop_step="$end0" \
        --resume auto)" = 3 ] || fail "$name: run B did not stop at step $end0"
  "$py" - "$work/$name" "$from" "$to" "$epochs" "$stop" "$end0" <<'PY'
import glob, json, math, sys
import h5py, numpy as np
d, R, Rn, epochs, stop, end0 = sys.argv[1], *map(int, sys.argv[2:])
B, warmup, base, lo = 16, 4, 1.0e-3, 1.0e-5
ck = lambda run, step: f"{d}/{run}/checkpoints/step-{step:07d}"
with h5py.File(ck("stopped", stop) + "/glofnd_image.h5") as f:
    N = f["values"].shape[0]
blk = lambda n, r: n // r  # smallest block
steps_at = lambda r: blk(N, r) // B
# Schedule: steps of the first launch's global batch (16 x R); T0 = its epochs at R ranks.
T0 = epochs * steps_at(R)
def lr_at(s):
    if s < warmup: return base * (s + 1.0) / warmup
    return lo + (base - lo) * 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / (T0 - warmup))))
def samples_before(step):  # samples seen before step `step` (1-based) of the elastic run
    return (step - 1) * B * R if step <= stop else stop * B * R + (step - 1 - stop) * B * Rn
left = end0 - stop
for run in ("stopped", "a"):
    recs = [json.loads(l) for l in open(f"{d}/{run}/metrics.jsonl")]
    m = {r["step"]: r for r in recs if "itc" in r}
    assert sorted(m) == list(range(1, max(m) + 1)), f"{run}: steps logged {sorted(m)[:5]}..."
    for k, r in m.items():
        assert r["samples"] == samples_before(k + 1), f"{run} step {k}: samples {r['samples']} != {samples_before(k + 1)}"
        want = lr_at(samples_before(k) / (B * R))
        assert abs(r["lr"] - want) <= 1e-12 * want, f"{run} step {k}: lr {r['lr']} != schedule {want}"
        assert math.isfinite(r["loss"]), f"{run} step {k}: loss {r['loss']}"
last = max(m)
want_last = end0 + (epochs - 1) * steps_at(Rn)
assert last == want_last, f"run A ended at step {last}, expected {want_last} (epoch 0 to {end0}, then {epochs - 1} x {steps_at(Rn)})"
assert last - stop >= 30, f"only {last - stop} steps after the resume"
assert json.load(open(f"{d}/a/summary.json"))["status"] == "completed"
# Per-pair state at the end of epoch 0 (run B's checkpoint) against the stopped run's.
for side in ("image", "text"):
    with h5py.File(ck("stopped", stop) + f"/glofnd_{side}.h5") as f, h5py.File(ck("b", end0) + f"/glofnd_{side}.h5") as g:
        s0, s1 = f["values"][:], g["values"][:]
        assert f["valid"][:].all() and g["valid"][:].all()
    c0, c1 = s0[:, 3], s1[:, 3]
    assert set(np.unique(c1)) <= {0.0, 1.0}, f"{side}: a pair drawn twice in epoch 0 (counts {np.unique(c1)})"
    drawn = int((c1 == 1).sum())
    assert drawn == stop * B * R + left * B * Rn, f"{side}: {drawn} pairs drawn in epoch 0, expected {stop}x{B}x{R} + {left}x{B}x{Rn}"
    # What epoch 0 had planned at R ranks and not drawn by the stop, all of it or as much as the
    # smallest new block's share allows (the ranks stay in step).
    planned_left = (steps_at(R) - stop) * B * R
    dropped = planned_left - left * B * Rn
    assert left > 0 and dropped >= 0 and (Rn > 1 or dropped < B), \
        f"{side}: {left} steps x {B} x {Rn} after the resume, of the {planned_left} planned pairs left"
    before = c0 == 1
    assert before.sum() == stop * B * R
    assert np.array_equal(s0[before].view(np.uint32), s1[before].view(np.uint32)), \
        f"{side}: state of the pairs drawn before the stop changed across the resume"
    assert (c1[~before] == 1).sum() == left * B * Rn
print(f"ok   {R} -> {Rn} ranks: epoch 0 completed with {left} more steps ({N - drawn} of {N} pairs never drawn, none twice); "
      f"pre-stop per-pair state bitwise; lr = schedule(samples) at all {last} steps; ended at step {last}")
PY
}

case_ 2 1 2
case_ 1 2 3
case_ 2 4 5

# GRIT (q = 1, cached embeddings) with GloFND, 3 epochs: 2 ranks stopped in the uniform epoch 0,
# 1 rank (the epoch continues: the block is the dataset, so all 6 x 2 planned batches left run and
# it ends at step 22, where a stop keeps the per-pair state), 1 rank again stopped in grouped
# epoch 1 at step 30, 2 ranks to the end: the grouped epoch continues from the old rank's
# unselected pairs (GroupedSampler::resplit). Run B stops at the end of epoch 1 to read the state.
echo "== grit + glofnd: 2 ranks -> 1 rank in epoch 0 -> 2 ranks in grouped epoch 1"
grit=(--set sampler.search_space=128 --set sampler.kind=grit --set sampler.grit.q=1
      --set sampler.embeddings=cached --set train.epochs=3 --set checkpoint.keep_last=10
      "${glofnd[@]}")
g=$work/grit
[ "$(pretrain 2 "$g" "${grit[@]}" --set fault.stop_step=$stop)" = 3 ] || fail "grit: no stop at $stop"
mv "$g.log" "$g.1.log"
[ "$(pretrain 1 "$g" "${grit[@]}" --set fault.stop_step=22 --resume auto)" = 3 ] ||
  fail "grit: the 1-rank run did not stop at step 22"
grep -q "continues on 1 ranks" "$g.log" || fail "grit: its uniform epoch 0 did not continue"
mv "$g.log" "$g.2.log"
[ "$(pretrain 1 "$g" "${grit[@]}" --set fault.stop_step=30 --resume auto)" = 3 ] ||
  fail "grit: the 1-rank run did not stop at step 30"
mv "$g.log" "$g.3.log"
cp -a "$g" "$g.b"
[ "$(pretrain 2 "$g" "${grit[@]}" --resume auto)" = 0 ] || fail "grit: the last run did not complete"
left1=$(sed -n 's/.*continues on 2 ranks: .* give \([0-9]*\) more steps.*/\1/p' "$g.log" | head -1)
[ -n "$left1" ] || fail "grit: grouped epoch 1 did not continue on 2 ranks"
end1=$((30 + left1))
[ "$(pretrain 2 "$g.b" "${grit[@]}" --set fault.stop_step=$end1 --resume auto)" = 3 ] ||
  fail "grit: run B did not stop at step $end1"
"$py" - "$g" "$stop" "$end1" <<'PY'
import json, math, sys
import h5py, numpy as np
g, stop, end1 = sys.argv[1], *map(int, sys.argv[2:])
B, warmup, base, lo, N, M = 16, 4, 1.0e-3, 1.0e-5, 540, 128
G = lambda n: (n // M) * (M // B) + (n % M) // B  # grouped batches of a block of n
u2, g2 = (N // 2) // B, G(N // 2)
T0 = u2 + 2 * g2  # the schedule: 3 epochs at 2 ranks
end0 = stop + (u2 - stop) * 2  # epoch 0's planned batches left, all on the 1-rank block
assert end0 == 22
segments = [(stop, 2 * B), (30, B), (end1 + g2, 2 * B)]  # (last step, global batch)
m = {r["step"]: r for r in map(json.loads, open(g + "/metrics.jsonl")) if "itc" in r}
assert max(m) == segments[-1][0], f"ended at step {max(m)}, expected {segments[-1][0]}"
assert [m[k]["epoch"] for k in (stop + 1, end0, end0 + 1, end1, end1 + 1)] == [0, 0, 1, 1, 2]
samples, first = 0, 1
for last, gb in segments:
    for k in range(first, last + 1):
        assert m[k]["samples"] == samples + gb, f"step {k}: samples {m[k]['samples']} != {samples + gb}"
        s = samples / (2 * B)
        want = base * (s + 1) / warmup if s < warmup else lo + (base - lo) * 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / (T0 - warmup))))
        assert abs(m[k]["lr"] - want) <= 1e-12 * want, f"step {k}: lr {m[k]['lr']} != {want}"
        samples += gb
    first = last + 1
assert all(m[k]["q_mean"] == 1 for k in m if m[k]["epoch"] >= 1), "GRIT's grouped epochs lost q = 1"
ck = lambda step: f"{g}.b/checkpoints/step-{step:07d}"
for side in ("image", "text"):
    st = {}
    for step in (end0, 30, end1):
        with h5py.File(ck(step) + f"/glofnd_{side}.h5") as f:
            st[step] = f["values"][:]
    e1 = st[end1][:, 3] - st[end0][:, 3]  # draws of each pair in epoch 1
    assert set(np.unique(e1)) <= {0.0, 1.0}, f"{side}: a pair drawn twice in grouped epoch 1"
    assert e1.sum() == (30 - end0) * B + (end1 - 30) * 2 * B, f"{side}: {e1.sum()} draws in epoch 1"
    before = st[30][:, 3] - st[end0][:, 3] == 1
    assert np.array_equal(st[30][before].view(np.uint32), st[end1][before].view(np.uint32)), \
        f"{side}: state of the pairs drawn in epoch 1 before the stop changed across the resume"
print(f"ok   grit: epoch 0 continued at 1 rank, grouped epoch 1 continued at 2 ranks ({end1 - 30} steps, "
      f"none twice, earlier draws' state bitwise), ended at step {max(m)}; lr = schedule(samples) throughout")
PY

# FALCON (2 epochs, refresh embeddings): 1 rank stopped 8 steps into grouped epoch 1, 2 ranks to
# the end: the grouped epoch continues, rank 0's policy and baseline stand in for the new rank's
# (a warning says so), and the two policy replicas stay equal.
echo "== falcon: 1 rank -> 2 ranks in grouped epoch 1"
f=$work/falcon
falcon=(--set sampler.search_space=128 --set sampler.kind=falcon --set train.epochs=2
        --set train.export_embeddings=true)
[ "$(pretrain 1 "$f" "${falcon[@]}" --set fault.stop_step=41)" = 3 ] || fail "falcon: no stop at 41"
mv "$f.log" "$f.1.log"
[ "$(pretrain 2 "$f" "${falcon[@]}" --resume auto)" = 0 ] || fail "falcon: the 2-rank run did not complete"
grep -q "continues on 2 ranks" "$f.log" || fail "falcon: grouped epoch 1 did not continue on 2 ranks"
grep -q "falcon: checkpoint of 1 ranks resumed on 2" "$f.log" || fail "falcon: no warning about its baseline"
"$py" - "$f" <<'PY'
import json, sys
m = [r for r in map(json.loads, open(sys.argv[1] + "/metrics.jsonl")) if "itc" in r]
after = [r for r in m if r["step"] > 41]
assert after and all(r["epoch"] == 1 for r in after), "the resumed run left epoch 1"
assert all(r["falcon_policy_replicas_equal"] is True and 0 < r["q_mean"] < 1 for r in after)
print(f"ok   falcon: grouped epoch 1 continued on 2 ranks for {len(after)} steps, policy replicas equal")
PY
