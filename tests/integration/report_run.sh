#!/usr/bin/env bash
# fnvlp-simstat and fnvlp-report on a real (tiny) pretraining run: synth -> shard -> 6 steps of
# fnvlp-pretrain at 2 ranks -> simstat at 2 ranks on the exported embeddings -> report. The plain
# uniform run has no FN telemetry and no lambda: the report must skip those plots with a note. A
# copy of the run whose embeddings carry lambda (as GloFND exports them) and a small campaign
# layout exercise the lambda scatter and the mean +- std table.
set -euo pipefail
bin=$1 vocab=$2 src=$3
# shellcheck source=tests/integration/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" report
py=/usr/bin/python3
synth_data "$work/synth" 96 3 4 5
shard_split "$work/synth" train "$work/shards"
"${mpirun[@]}" "$bin/jobs/fnvlp-pretrain" --config "$src/jobs/configs/tiny.yaml" --data "$work/shards" \
  --out "$work/run" --set train.batch_size=16 --set train.max_steps=6 --set train.log_every=1 \
  --set checkpoint.every_steps=0 >/dev/null
emb=$(find "$work/run/embeddings" -maxdepth 1 -name 'epoch-*.h5' | sort | tail -1)

echo "== simstat at 2 ranks"
"${mpirun[@]}" "$bin/analysis/fnvlp-simstat" --embeddings "$emb" --out "$work/stats.h5" \
  --alpha 0.05 --quantiles 20 --fnc-batch 16 --json "$work/stats.json"
$py - "$work/stats.h5" "$work/stats.json" "$emb" <<'PY'
import json, math, sys
import h5py, numpy as np
s, j, e = h5py.File(sys.argv[1]), json.load(open(sys.argv[2])), h5py.File(sys.argv[3])
n = e["image_emb"].shape[0]
assert s.attrs["n"] == n and s.attrs["quantiles"] == 20 and abs(s.attrs["alpha"] - 0.05) < 1e-12
assert (s["pair_id"][:] == np.arange(n)).all()
for m, other in (("image", "text"), ("text", "image")):
    a, c = e[m + "_emb"][:].astype(np.float64), e[other + "_emb"][:].astype(np.float64)
    sim, ids, lab = a @ c.T, e["image_id"][:], e["label"][:]
    thr, q = s["threshold_" + m][:], s["quantiles_" + m][:]
    for i in range(n):
        neg = np.sort(sim[i][ids != ids[i]])[::-1]
        k = max(1, math.ceil(0.05 * len(neg)))
        # float32 GEMM against a float64 check: equal to ~1e-6, and the count is exact.
        assert abs(thr[i] - neg[k - 1]) < 1e-5, (m, i, thr[i], neg[k - 1])
        assert s["count_exact_" + m][i] >= k and s["n_neg_" + m][i] == len(neg)
        assert abs(q[i, 0] - neg[-1]) < 1e-5 and abs(q[i, -1] - neg[0]) < 1e-5
        assert (np.diff(q[i]) >= 0).all(), "quantiles not ascending"
    ex = j[m]["exact"]
    assert 0 <= ex["precision"] <= 1 and ex["flagged"] == int(s["count_exact_" + m][:][lab >= 0].sum())
print("simstat: %d pairs, image exact P/R %.3f/%.3f, FNC P/R %.3f/%.3f" % (n,
      j["image"]["exact"]["precision"], j["image"]["exact"]["recall"],
      j["image"]["fnc"]["precision"], j["image"]["fnc"]["recall"]))
PY

echo "== report of the plain run (no telemetry, no lambda)"
"$bin/analysis/fnvlp-report" --run "$work/run" --stats "$work/stats.h5" --out "$work/rep1"
$py - "$work/rep1" <<'PY'
import json, os, re, sys
d = sys.argv[1]
r = json.load(open(d + "/report.json"))
html = open(d + "/report.html").read()
for png in re.findall(r'src="([^"]+)"', html):
    assert not png.startswith("/") and os.path.getsize(os.path.join(d, png)) > 1000, png
assert os.path.exists(d + "/loss.png") and "exact" in r["stats"]["image"]
notes = " ".join(r["notes"])
assert "filtered_frac.png: skipped" in notes and "lambda vs exact threshold: skipped" in notes, notes
assert "glofnd" not in r["stats"]["image"]
# Read top down: the summary of what ran before the plots, one metric per row, no raw JSON.
assert html.index("<h2>Summary</h2>") < html.index("<h2>Plots</h2>"), "summary not first"
assert "negatives <b>none</b>, sampler <b>uniform</b>, 6 steps" in html, "summary lacks the run"
assert '{"' not in html and "phase_ms.backward" in html, "raw JSON in the page"
print("plain report: %d plots, %d notes" % (len(r["plots"]), len(r["notes"])))
PY

echo "== a series with a single point is not drawn"
cp -r "$work/run" "$work/run_val1"
echo '{"epoch": 0, "step": 6, "val_r_mean": 7.5, "val_pairs": 80, "val_txt_r1": 1.0, "val_txt_r5": 5.0, "val_txt_r10": 10.0, "val_img_r1": 2.0, "val_img_r5": 6.0, "val_img_r10": 11.0}' \
  >>"$work/run_val1/metrics.jsonl"
"$bin/analysis/fnvlp-report" --run "$work/run_val1" --out "$work/rep_val1"
$py - "$work/rep_val1" <<'PY'
import json, os, sys
d = sys.argv[1]
r = json.load(open(d + "/report.json"))
html = open(d + "/report.html").read()
assert "val.png: skipped, a single logged point" in " ".join(r["notes"]), r["notes"]
assert not os.path.exists(d + "/val.png") and 'src="val.png"' not in html
assert "r_mean <b>7.50</b> at step 6" in html, "the summary lacks the validation result"
PY

echo "== report with lambda (GloFND-style export) and a campaign"
cp -r "$work/run" "$work/run_lambda"
emb2=$work/run_lambda/embeddings/$(basename "$emb")
$py - "$emb2" "$work/stats.h5" "$work/camp" <<'PY'
import json, os, sys
import h5py, numpy as np
emb, stats, camp = sys.argv[1:4]
rng = np.random.default_rng(0)
with h5py.File(stats) as s, h5py.File(emb, "a") as e:
    for m in ("image", "text"):
        t = s["threshold_" + m][:]
        e["glofnd_lambda_" + m] = (t + rng.normal(0, 0.02, t.shape)).astype(np.float32)
for method, vals in (("uniform", (10.0, 12.0)), ("glofnd", (20.0, 21.0, 25.0))):
    for seed, v in enumerate(vals):
        t = "%s/tasks/%s-s%d" % (camp, method, seed)
        os.makedirs(t + "/run")
        json.dump({"index": seed, "method": method, "seed": seed, "overrides": []}, open(t + "/task.json", "w"))
        ev = {k: v + i for i, k in enumerate(["txt_r1", "txt_r5", "txt_r10", "img_r1", "img_r5", "img_r10"])}
        ev["r_mean"] = v
        json.dump(ev, open(t + "/eval.json", "w"))
os.makedirs(camp + "/tasks/falcon-s0")
json.dump({"index": 9, "method": "falcon", "seed": 0, "overrides": []}, open(camp + "/tasks/falcon-s0/task.json", "w"))
PY
# simstat reads lambda from the run directory (its newest embeddings file).
"${mpirun[@]}" "$bin/analysis/fnvlp-simstat" --embeddings "$emb" --lambda-from "$work/run_lambda" \
  --out "$work/stats2.h5" --alpha 0.05 --quantiles 20 --fnc-batch 16 >/dev/null
"$bin/analysis/fnvlp-report" --run "$work/run_lambda" --stats "$work/stats2.h5" --campaign "$work/camp" \
  --out "$work/rep2"
$py - "$work/rep2" <<'PY'
import json, os, statistics, sys
d = sys.argv[1]
r = json.load(open(d + "/report.json"))
for m in ("image", "text"):
    assert os.path.getsize("%s/lambda_vs_exact_%s.png" % (d, m)) > 1000
    g = r["stats"][m]["glofnd"]
    assert 0 < g["mean_abs_error"] < 0.05 and 0 <= g["precision"] <= 1, g
rows = {x["method"]: x for x in r["campaign"]["methods"]}
assert abs(rows["glofnd"]["r_mean"]["mean"] - 22.0) < 1e-9
assert abs(rows["glofnd"]["r_mean"]["std"] - statistics.stdev([20.0, 21.0, 25.0])) < 1e-9
assert rows["uniform"]["txt_r5"]["n"] == 2 and r["campaign"]["missing_eval"] == ["falcon-s0"]
html = open(d + "/report.html").read()
assert "22.00 &plusmn; 2.65" in html and "lambda_vs_exact_image.png" in html
# The claims page (analysis/claims.py): every claim has its section; only (f) has data here.
c = r["claims"]["claims"]
assert sorted(c) == list("abcdef") and c["a"]["verdict"] == "missing data", c["a"]
assert all("(%s) " % k in html for k in "abcdef") and "claim_f.png" in html
assert os.path.getsize(d + "/claim_f.png") > 1000 and "claim_a.png" not in html
print("lambda report: GloFND |err| image %.4f; campaign rows %s" % (
      r["stats"]["image"]["glofnd"]["mean_abs_error"], sorted(rows)))
PY

echo "== GloFND's numbers come with what the long-horizon arm found (--horizon)"
mkdir -p "$work/hz/t"
echo '# per epoch' >"$work/hz/t/horizon.md"
printf '{"sentence": "At 40 epochs GloFND filtered 0.07 <of> the negatives.", "table": "t/horizon.md"}\n' \
  >"$work/hz/long_horizon.json"
"$bin/analysis/fnvlp-report" --run "$work/run_lambda" --stats "$work/stats2.h5" \
  --horizon "$work/hz/long_horizon.json" --out "$work/rep5"
"$bin/analysis/fnvlp-report" --run "$work/run" --stats "$work/stats.h5" \
  --horizon "$work/hz/long_horizon.json" --out "$work/rep6"
"$bin/analysis/fnvlp-report" --run "$work/run_lambda" --stats "$work/stats2.h5" --horizon none \
  --out "$work/rep7"
$py - "$work" <<'PY'
import sys
w = sys.argv[1]
html = open(w + "/rep5/report.html").read()
summary = html[html.index("<h2>Summary</h2>"):html.index("</ul>", html.index("<h2>Summary</h2>"))]
assert "At 40 epochs GloFND filtered 0.07 &lt;of&gt; the negatives." in summary, summary
assert 'href="file://%s/hz/t/horizon.md"' % w in summary and "lambda off by" in summary, summary
# Not beside a run without GloFND, nor when switched off.
assert "At 40 epochs" not in open(w + "/rep6/report.html").read()
assert "At 40 epochs" not in open(w + "/rep7/report.html").read()
PY
echo "== a missing plotting tool is a clear error"
set +e
out=$("$bin/analysis/fnvlp-report" --run "$work/run" --out "$work/rep3" --python /nonexistent/python3 2>&1)
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "report without python succeeded"
echo "$out" | grep -q "python3-matplotlib" || fail "no clear message: $out"
echo "== a bad metrics record names the file and line"
printf '{"step": 1, "loss": 2}\nnot json\n' > "$work/run/metrics.jsonl"
set +e
out=$("$bin/analysis/fnvlp-report" --run "$work/run" --out "$work/rep4" 2>&1)
rc=$?
set -e
if [ "$rc" -eq 0 ] || ! grep -q "metrics.jsonl: line 2" <<<"$out"; then fail "bad record not named: $out"; fi
echo "report_run: OK"
