#!/usr/bin/env bash
# Every false-negative method of fnvlp-pretrain runs end to end at 2 ranks on a small synthetic
# dataset (tiny preset, 2 epochs) and leaves its telemetry in metrics.jsonl:
#   glofnd  filters negatives once λ has learned; λ is exported with the embeddings; its state is
#           restored on resume with ANOTHER rank count (2 -> 1) exactly;
#   fnc     filters about ceil(alpha * negatives) per anchor;
#   oracle  removes exactly the same-label negatives (precision and recall 1), refuses unlabelled data;
#   srcl    with a frozen helper (the uniform run's checkpoint) and without one;
#   tcl     logs finite IMC and LMI losses;
#   grit / falcon samplers (sampler.kind) log their hardness quantiles and the in-batch
#           false-negative rate; FALCON's policy replicas stay equal across ranks and its reward
#           compares the MLM losses under the same dropout masks;
#   grit    also on the training steps' cached embeddings (sampler.embeddings=cached), resumed;
#   glofnd  negatives.start_epoch holds λ and the filter back until that epoch; exact_init restarts
#           λ from the exact quantiles of the previous epoch's export.
set -euo pipefail
bin=$1 vocab=$2 src=$3
py=/usr/bin/python3
# shellcheck source=tests/integration/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" methods
synth_data "$work/synth" 120 5 8 5
shard_split "$work/synth" train "$work/shards" --shard-size 300
common=(--config "$src/jobs/configs/tiny.yaml" --data "$work/shards" --set train.batch_size=16
        --set train.epochs=2 --set train.log_every=4 --set optim.warmup_steps=4
        --set checkpoint.every_steps=0 --set train.deterministic=true)
run() { local name=$1; shift; echo "== $name"; "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/$name" "$@"; }
# check RUN 'python expression over m (list of step records) and s (summary)'
check() {
  "$py" - "$work/$1" "$2" "$3" <<'PY'
import json, math, sys
run, expr, what = sys.argv[1:4]
recs = [json.loads(l) for l in open(run + "/metrics.jsonl")]
m = [r for r in recs if "itc" in r]
s = json.load(open(run + "/summary.json"))
assert s["status"] == "completed", f"{run}: status {s['status']}"
assert all(math.isfinite(r["loss"]) for r in m), f"{run}: non-finite loss"
if not eval(expr):
    print(f"FAIL {what}: {expr}\nlast record: {m[-1]}")
    sys.exit(1)
print(f"ok   {what}")
PY
}

# run_stopped NAME ARGS...: a run that fault.stop_step (in ARGS) stops must exit 3 (requeue).
run_stopped() {
  local rc=0
  run "$@" || rc=$?
  [ "$rc" -eq 3 ] || fail "stopped $1 run exited $rc, expected 3"
}

run uniform
check uniform 'all("batch_fn_rate_label" in r and "filtered_frac_i2t" not in r for r in m)' \
  "uniform logs the in-batch FN rate and filters nothing"
check uniform 'abs(sum(r["batch_fn_rate_label"] for r in m) / len(m) - 1 / 8) < 0.06' \
  "uniform batches hold about 1/8 same-label pairs (8 balanced classes)"
# Phase times: all phases logged, the model's own phases dominate, and together they account for
# the step time the throughput implies (median over windows; 16 samples x 2 ranks per step).
phases='("batch", "forward", "negatives", "backward", "comm", "optimizer", "falcon", "other")'
check uniform "all(set(r['phase_ms']) == set($phases) and min(r['phase_ms'].values()) >= 0 for r in m)" \
  "every window logs the eight step phases"
check uniform '0.8 < sorted(sum(r["phase_ms"].values()) / (1e3 * 32 / r["samples_per_s"]) for r in m)[len(m) // 2] < 1.2' \
  "the phases add up to the step time"
check uniform 'all(r["phase_ms"]["falcon"] < 0.02 * r["phase_ms"]["forward"] for r in m)' \
  "no FALCON work without FALCON"
# The payload each rank logs per step is what tests/bench/comm_model.py's model says (gradient,
# features and their cross-rank gradient sums, ids, agreements), byte for byte.
"$py" "$src/tests/bench/comm_model.py" check "$work/uniform/metrics.jsonl" \
  "$src/jobs/configs/tiny.yaml" 2 16 || fail "logged bytes per step differ from the model"

# This checks the wiring, not convergence (the unit tests show λ reaching the exact quantile): an
# anchor's λ moves about negatives.glofnd.lr per epoch (one Adam step per visit), and the tiny model's
# similarities stay within ~0.001 of each other over two epochs here, so λ starts at 0.5 and
# steps 0.3 per visit: it passes below the similarities in epoch 1, where negatives above it must
# leave the loss (and the telemetry must say so).
glofnd=(--set negatives.method=glofnd --set negatives.alpha=0.05 --set negatives.glofnd.init=0.5
        --set negatives.glofnd.lr=0.3)
run glofnd "${glofnd[@]}"
check glofnd 'm[-1]["lambda_image_mean"] < 0.5 and any(r.get("filtered_frac_i2t", 0) > 0 for r in m)' \
  "GloFND's λ leaves its initial value and filters"
check glofnd 'all(k in m[-1] for k in ("lambda_text_p5", "lambda_text_p95", "fn_precision", "fn_recall", "fn_f1"))' \
  "GloFND logs λ percentiles and FN precision/recall"
"$py" - "$work/glofnd" <<'PY'
import glob, h5py, sys
f = sorted(glob.glob(sys.argv[1] + "/embeddings/epoch-*.h5"))[-1]
with h5py.File(f) as h:
    li, lt = h["glofnd_lambda_image"][:], h["glofnd_lambda_text"][:]
    assert li.shape == h["pair_id"].shape and lt.shape == li.shape, "λ not one per pair"
    assert (li != 0.5).mean() > 0.9, f"{f}: most λ_I never updated"
print("ok   λ exported with the embeddings")
PY

run glofnd_start1 "${glofnd[@]}" --set negatives.start_epoch=1
check glofnd_start1 'not any(k in r for r in m if r["epoch"] == 0 for k in ("lambda_image_mean", "filtered_frac_i2t")) and all("lambda_image_mean" in r and "filtered_frac_i2t" in r for r in m if r["epoch"] == 1)' \
  "GloFND from negatives.start_epoch = 1: no λ update or filtering in epoch 0, both in epoch 1"
# Beyond the paper: λ restarts from the exact (1−α)-quantiles of the previous epoch's export at
# start_epoch and every reanchor_every epochs. With a negligible Adam lr λ stays where it
# restarted, so each export's λ must equal fnvlp-simstat's thresholds of the export before it.
run glofnd_exact "${glofnd[@]}" --set negatives.start_epoch=1 --set negatives.glofnd.exact_init=true \
  --set negatives.glofnd.reanchor_every=1 --set negatives.glofnd.lr=1e-12 --set train.epochs=3
for e in 0 1; do
  "${mpirun[@]}" "$bin/analysis/fnvlp-simstat" --embeddings "$work/glofnd_exact/embeddings/epoch-00$e.h5" \
    --out "$work/exact$e.h5" --alpha 0.05 --quantiles 2 >/dev/null
done
check glofnd_exact '[r["glofnd_exact_init_epoch"] for r in m if "glofnd_exact_init_epoch" in r] == [1, 2] and all(r["glofnd_exact_init_seconds"] >= 0 for r in m if "glofnd_exact_init_seconds" in r)' \
  "GloFND exact_init: restarted at epochs 1 and 2, with its cost in the metrics"
"$py" - "$work" <<'PY'
import sys, h5py, numpy as np
w = sys.argv[1]
for e in (0, 1):
    with h5py.File(f"{w}/glofnd_exact/embeddings/epoch-00{e + 1}.h5") as x, h5py.File(f"{w}/exact{e}.h5") as s:
        for side in ("image", "text"):
            lam, thr = x[f"glofnd_lambda_{side}"][:], s[f"threshold_{side}"][:]
            ok = ~np.isnan(thr)
            assert ok.sum() > 0.9 * len(thr), f"epoch {e}: too few anchors with negatives"
            gap = np.abs(lam[ok] - thr[ok]).max()
            assert gap < 1e-6, f"epoch {e + 1} λ_{side} is not the exact threshold of epoch {e}: max gap {gap}"
            assert np.abs(lam - 0.5).max() > 0.01, f"λ_{side} still at its init 0.5"
print("ok   GloFND exact_init: λ of epochs 1 and 2 = simstat's exact thresholds of epochs 0 and 1")
PY
echo "== glofnd stopped at 2 ranks, resumed at 1 rank"
run_stopped glofnd_r "${glofnd[@]}" --set fault.stop_step=20
# max_steps = the checkpoint's step: the resumed 1-rank run trains no further and exports the
# restored λ, which must equal the checkpoint's per-pair state.
mpirun --oversubscribe -np 1 "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/glofnd_r" \
  "${glofnd[@]}" --set train.max_steps=20 --resume auto
"$py" - "$work/glofnd_r" <<'PY'
import glob, h5py, numpy as np, sys
run = sys.argv[1]
emb = sorted(glob.glob(run + "/embeddings/epoch-*.h5"))[-1]
with h5py.File(emb) as e, h5py.File(run + "/checkpoints/step-0000020/glofnd_image.h5") as c:
    saved = c["values"][:, 0]
    assert c["valid"][:].all(), "checkpoint lacks some pairs"
    assert np.array_equal(e["glofnd_lambda_image"][:], saved), "λ_I not restored exactly at 1 rank"
    assert (saved != 0.5).any(), "checkpoint λ never learned"
print("ok   GloFND state written at 2 ranks restored exactly at 1 rank")
PY

run fnc --set negatives.method=fnc --set negatives.alpha=0.05
check fnc 'all(0 < r["filtered_frac_i2t"] < 0.1 for r in m)' "FNC filters ceil(alpha * n_neg) per anchor"

run oracle --set negatives.method=oracle
check oracle 'all(r["fn_precision"] == 1 and r["fn_recall"] == 1 and r["filtered_frac_i2t"] > 0 for r in m)' \
  "the oracle removes exactly the same-label negatives"
# Without labels the oracle is undefined: refused on every rank (exit 1, no rank left waiting),
# naming the data. The same captions with their "label" keys removed.
"$py" - "$work/synth/captions.json" "$work/nolabel.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for e in (d if isinstance(d, list) else d.get("annotations", d)):
    e.pop("label", None)
json.dump(d, open(sys.argv[2], "w"))
PY
"${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$work/nolabel.json" --image-root "$work/synth" \
  --split-file "$work/synth/splits.json" --split train --vocab "$vocab" --out "$work/shards_nolabel" \
  --image-size 64 --shard-size 300 >/dev/null
rc=0
timeout 120 "${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --data "$work/shards_nolabel" \
  --out "$work/oracle_nolabel" --set negatives.method=oracle >"$work/oracle_nolabel.log" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
  fail "oracle on unlabelled data: exit $rc (expected a refusal)"
fi
grep -q "negatives.method=oracle needs every pair's class label.*shards_nolabel" "$work/oracle_nolabel.log" ||
  fail "oracle on unlabelled data: no named error in $work/oracle_nolabel.log"
echo "ok   the oracle refuses unlabelled data (exit $rc) naming it"

run srcl --set negatives.method=srcl --set negatives.srcl.helper="$work/uniform/checkpoints/latest"
check srcl 'm[0]["srcl_helper_weight"] > m[-1]["srcl_helper_weight"] >= 0' "SRCL's helper weight decays"
run srcl_nohelper --set negatives.method=srcl --set train.epochs=1
check srcl_nohelper 'm[-1]["srcl_helper_weight"] == 0' "SRCL without a helper uses the model alone"

run tcl --set loss.tcl=true
check tcl 'all(r["imc"] > 0 and r["lmi"] > 0 for r in m)' "TCL logs IMC and LMI"

grouped=(--set sampler.search_space=128)
run grit "${grouped[@]}" --set sampler.kind=grit --set sampler.grit.q=1
check grit 'all(r["q_mean"] == 1 for r in m if r["epoch"] == 1) and not any("q_mean" in r for r in m if r["epoch"] == 0)' \
  "GRIT: epoch 0 uniform, then picks at q = 1"
# FALCON Fig. 2: grouping by the most similar raises the in-batch false-negative rate.
"$py" - "$work/uniform" "$work/grit" <<'PY'
import json, sys
def rate(run):
    m = [json.loads(l) for l in open(run + "/metrics.jsonl")]
    v = [r["batch_fn_rate_label"] for r in m if r.get("epoch") == 1 and "batch_fn_rate_label" in r]
    return sum(v) / len(v)
u, g = rate(sys.argv[1]), rate(sys.argv[2])
assert g > 1.3 * u, f"GRIT q=1 same-label rate {g:.3f} not above uniform's {u:.3f}"
print(f"ok   in-batch same-label rate, epoch 1: GRIT q=1 {g:.3f} > uniform {u:.3f}")
PY
# sampler.embeddings=cached (issue 27): GRIT groups epoch 1 by the embeddings the training steps
# of epoch 0 computed, with no export pass; RUN/embeddings/cached-000.h5 holds what it grouped by.
# Three epochs: a run stopped in epoch 1 groups epoch 2 by the cache it restored.
cached=("${grouped[@]}" --set sampler.kind=grit --set sampler.grit.q=1 --set sampler.embeddings=cached
        --set train.export_embeddings=false --set train.log_every=1 --set train.epochs=3)
run grit_cached "${cached[@]}"
check grit_cached 'all(r["q_mean"] == 1 for r in m if r["epoch"] >= 1) and not any("q_mean" in r for r in m if r["epoch"] == 0)' \
  "GRIT on cached embeddings: epoch 0 uniform, then picks at q = 1 in epochs 1 and 2"
grep -q "epoch 1 grouped by the training passes' embeddings ([0-9]* of [0-9]* pairs never in a step" \
  "$work/grit_cached/logs/rank-0.log" || fail "no log line of the cached embeddings"
"$py" - "$work/grit_cached" <<'PY'
import glob, sys, h5py, numpy as np
run = sys.argv[1]
assert not glob.glob(run + "/embeddings/epoch-*.h5"), "an export pass ran"
with h5py.File(run + "/embeddings/cached-000.h5") as h:
    n = len(h["pair_id"])
    assert n > 0 and (h["pair_id"][:] == np.arange(n)).all(), "cached rows are not every pair in order"
    for side in ("image_emb", "text_emb"):
        x = h[side][:]
        assert np.abs(np.linalg.norm(x, axis=1) - 1).max() < 1e-4, f"{side}: rows not unit embeddings"
        assert len(np.unique(x.round(5), axis=0)) > 0.9 * n, f"{side}: rows repeat"
print(f"ok   cached embeddings: {n} pairs, unit norm, no export pass")
PY
echo "== grit on cached embeddings stopped mid grouped epoch, resumed: same losses"
run_stopped grit_cached_r "${cached[@]}" --set fault.stop_step=22
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/grit_cached_r" "${cached[@]}" \
  --resume auto
"$py" - "$work/grit_cached" "$work/grit_cached_r" <<'PY'
import json, sys
def losses(run):
    return {r["step"]: (r["itc"], r["itm"], r["mlm"], r["batch_fn_rate_label"])
            for r in map(json.loads, open(run + "/metrics.jsonl")) if "itc" in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert a == b, "resumed cached GRIT run differs: " + str([(s, a[s], b.get(s)) for s in a if a[s] != b.get(s)][:3])
print(f"ok   cached GRIT resumed mid-epoch reproduces all {len(a)} logged windows bitwise")
PY
run softening "${grouped[@]}" --set sampler.kind=grit --set sampler.grit.schedule=softening --set train.epochs=3
check softening '[round(r["q_mean"], 6) for r in m if r["epoch"] == 1][0] == 1 and [r["q_mean"] for r in m if r["epoch"] == 2][-1] == 0' \
  "progressive softening: q 1 in the first grouped epoch, 0 in the last"

run falcon "${grouped[@]}" --set sampler.kind=falcon --set train.log_every=1
check falcon 'all(r["phase_ms"]["falcon"] > 0.2 * r["phase_ms"]["forward"] for r in m if r["epoch"] == 1)' \
  "FALCON's reward pass and policy step show in the falcon phase"
check falcon 'all("falcon_reward" in r and 0 < r["q_mean"] < 1 for r in m if r["epoch"] == 1)' \
  "FALCON draws q in (0, 1) per anchor and logs its REINFORCE reward"
check falcon 'all(r["falcon_policy_replicas_equal"] is True for r in m if r["epoch"] == 1)' \
  "FALCON's policy replicas stay bitwise equal on both ranks"
# Alg. 2's reward is the MLM-loss drop the update caused: with dropout on and a zero learning rate
# it must be exactly 0 (the reward pass repeats the step's dropout masks).
run falcon_dropout "${grouped[@]}" --set sampler.kind=falcon --set train.log_every=1 \
  --set model.dropout=0.1 --set optim.lr=0 --set optim.min_lr=0
check falcon_dropout '[r["falcon_reward"] for r in m if r["epoch"] == 1] and all(r["falcon_reward"] == 0 for r in m if r["epoch"] == 1)' \
  "FALCON's reward under dropout 0.1 with lr 0 is exactly 0 (same dropout masks before and after)"
echo "== falcon stopped mid grouped epoch, resumed: same losses as uninterrupted"
run_stopped falcon_r "${grouped[@]}" --set sampler.kind=falcon --set train.log_every=1 --set fault.stop_step=22
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" "${common[@]}" --out "$work/falcon_r" "${grouped[@]}" \
  --set sampler.kind=falcon --set train.log_every=1 --resume auto
"$py" - "$work/falcon" "$work/falcon_r" <<'PY'
import json, sys
def losses(run):
    return {r["step"]: (r["itc"], r["itm"], r["mlm"], r.get("falcon_reward"))
            for r in map(json.loads, open(run + "/metrics.jsonl")) if "itc" in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert a == b, "resumed FALCON run differs: " + str([(s, a[s], b.get(s)) for s in a if a[s] != b.get(s)][:3])
print(f"ok   FALCON resumed mid-epoch reproduces all {len(a)} logged windows bitwise")
PY
echo "all methods ran"
