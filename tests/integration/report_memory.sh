#!/usr/bin/env bash
# fnvlp-report streams fnvlp-simstat's output (issue 66): on synthetic STATS.h5 files of N_SMALL
# and N_BIG pairs (tests/integration/make_stats.py) its FN table equals the sums computed while the
# files were written, its lambda plots are drawn from at most 20,000 points whatever N, and its own
# peak memory (logged) grows by less than GROWTH_MB from N_SMALL to N_BIG; reading the datasets
# whole grows it by ~100 MB per million pairs.
#   report_memory.sh BUILD_DIR SRC_DIR [N_SMALL N_BIG GROWTH_MB]
set -euo pipefail
bin=$1 src=$2
small=${3:-262144} big=${4:-1000003} growth=${5:-12}
# shellcheck source=tests/integration/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" report_memory
py=/usr/bin/python3
declare -A peak
for n in "$small" "$big"; do
  "$py" "$src/tests/integration/make_stats.py" "$n" "$work/run$n" "$work/stats$n.h5" --quantiles 16 \
    >"$work/want$n.json"
  "$bin/analysis/fnvlp-report" --run "$work/run$n" --stats "$work/stats$n.h5" --out "$work/rep$n" \
    --horizon none >"$work/log$n" 2>&1 || { cat "$work/log$n"; exit 1; }
  peak[$n]=$(sed -n 's/.*peak memory \([0-9.]*\) MiB.*/\1/p' "$work/log$n")
  [ -n "${peak[$n]}" ] || { echo "FAIL: no peak memory line in the report's log"; cat "$work/log$n"; exit 1; }
  "$py" - "$work/rep$n" "$work/want$n.json" "$n" <<'PY'
import csv, json, os, sys
d, want, n = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
r = json.load(open(d + "/report.json"))["stats"]
for m in ("image", "text"):
    w, got = want[m], r[m]
    for key, table in (("exact", "exact"), ("fnc", "fnc"), ("lambda", "glofnd")):
        t = got[table]
        assert t["flagged"] == w[key] and t["true_fn"] == w[key + "_label"], (m, key, t, w)
        assert abs(t["recall"] - w[key + "_label"] / w["n_label"]) < 1e-12, (m, key, t)
    assert abs(got["fnc"]["mean_abs_error"] - w["fnc_mean_abs_error"]) < 1e-9, (m, got["fnc"])
    assert abs(got["glofnd"]["mean_abs_error"] - w["lambda_mean_abs_error"]) < 1e-9, (m, got["glofnd"])
    points = sum(1 for _ in open("%s/data/lambda_%s.csv" % (d, m))) - 1
    assert 0 < points <= 20000 and points >= min(n, 20000) // 2, (m, points)
    bins = list(csv.DictReader(open("%s/data/lambda_error_%s.csv" % (d, m))))
    assert sum(int(b["count"]) for b in bins) == w["anchors"], (m, "histogram misses anchors")
    for p in ("lambda_vs_exact_%s.png" % m, "lambda_error_%s.png" % m):
        assert os.path.getsize(os.path.join(d, p)) > 1000, p
print("N = %d: FN tables, mean errors and the error histogram's %d anchors as written" % (n, want["image"]["anchors"]))
PY
  echo "N = $n: report peak memory ${peak[$n]} MiB"
done
"$py" - "${peak[$small]}" "${peak[$big]}" "$growth" "$small" "$big" <<'PY'
import sys
a, b, g = map(float, sys.argv[1:4])
print("peak memory %.1f MiB at N = %s, %.1f MiB at N = %s: +%.1f MiB (at most %.0f)" % (a, sys.argv[4], b, sys.argv[5], b - a, g))
assert b - a < g, "the report's memory grows with the number of pairs"
PY
