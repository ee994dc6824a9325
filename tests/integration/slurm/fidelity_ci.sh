#!/usr/bin/env bash
# Issue 31's CI-sized fidelity campaign (slurm/campaigns/fidelity_ci.yaml) end to end on the real
# SLURM: every cell completes; GloFND's tasks leave simstat's lambda-vs-exact summary (stats.json);
# the collect job's report has the claims page; what is robust at this size holds on each seed:
# GRIT q=1's in-batch rate of known false negatives is above uniform sampling's (claim d), and
# GloFND's lambda moves from its start; the results copy rebuilds the same claims.
set -euo pipefail
export T_OWN_SHARDS=1
# shellcheck source=tests/integration/slurm/lib.sh
source "$(dirname "$0")/lib.sh" "$1" "$2" fidelity_ci
cd "$FNVLP_ROOT"
camp=$FNVLP_WORK/campaign
# lib.sh exported slurm/common.sh's smoke defaults, and the environment wins over the matrix's
# env: section: drop those the matrix sets.
read -r -a matrix_env < <(/usr/bin/python3 -c 'import sys, yaml
print(" ".join(yaml.safe_load(open(sys.argv[1]))["env"]))' slurm/campaigns/fidelity_ci.yaml)
unset "${matrix_env[@]}"
bash slurm/ablation_campaign.sh slurm/campaigns/fidelity_ci.yaml --out "$camp" --wait \
  >"$FNVLP_WORK/wait.log" 2>&1 || { cat "$FNVLP_WORK/wait.log"; fail "the campaign failed"; }
/usr/bin/python3 - "$camp" <<'PY'
import json, sys
camp = sys.argv[1]
c = json.load(open(camp + "/report/report.json"))["claims"]["claims"]
for seed in (1, 2):
    s = json.load(open(f"{camp}/tasks/glofnd-s{seed}/stats.json"))
    for m in ("image", "text"):
        g, f = s[m]["glofnd"]["mean_abs_error"], s[m]["fnc"]["mean_abs_error"]
        assert 0 <= g < 2 and 0 <= f < 2, (seed, m, g, f)
d = c["d"]["data"]
q1, uni = d["grit_q1_batch_fn_rate"]["seeds"], d["uniform_batch_fn_rate"]["seeds"]
print("in-batch FN rate: grit_q1 %s, uniform %s" % (q1, uni))
assert all(q1[s] > uni[s] for s in ("1", "2")), (q1, uni)
# Claim (a) at this size: lambda is learned and the filtered fraction is measured; its direction
# towards alpha is not robust here (first runs: seed 1 stayed at 0, seed 2 overshot to 0.28).
a = c["a"]["data"]["glofnd"]
first, last = a["filtered_fraction_first_epoch"]["seeds"], a["filtered_fraction_last_epoch"]["seeds"]
print("GloFND filtered fraction: first epoch %s, last %s, alpha %g" % (first, last, a["alpha"]))
assert all(0 <= v <= 1 for v in list(first.values()) + list(last.values())), (first, last)
for seed in (1, 2):
    recs = [json.loads(l) for l in open(f"{camp}/tasks/glofnd-s{seed}/run/metrics.jsonl")]
    lam = [r["lambda_image_mean"] for r in recs if "lambda_image_mean" in r]
    assert lam and abs(lam[-1] - 0.5) > 0.01, f"seed {seed}: lambda did not move from 0.5: {lam}"
for cid in "abcdef":
    assert c[cid]["verdict"] in ("held", "not held", "inconclusive at this spread", "missing data")
html = open(camp + "/report/report.html").read()
assert "claim_a.png" in html and "claim_d.png" in html, "claims plots missing from the page"
print({k: v["verdict"] for k, v in c.items()})
PY
# The committed form of the results: the report and its claims rebuilt from the copy alone.
/usr/bin/python3 analysis/campaign_results.py --campaign "$camp" --out "$FNVLP_WORK/results"
"$(fnvlp_bin fnvlp-report)" --campaign "$FNVLP_WORK/results" --out "$FNVLP_WORK/results-report"
/usr/bin/python3 - "$camp/report/data/claims.json" "$FNVLP_WORK/results-report/data/claims.json" \
  "$FNVLP_WORK/results" <<'PY'
import json, os, sys
a, b = (json.load(open(p))["claims"] for p in sys.argv[1:3])
assert a == b, "the claims rebuilt from the results differ from the campaign's"
big = [os.path.join(r, f) for r, _, fs in os.walk(sys.argv[3]) for f in fs
       if os.path.getsize(os.path.join(r, f)) > 200_000 or f.endswith((".h5", ".pt", ".png"))]
assert not big, f"results hold large or binary files: {big}"
logs = [f for _, _, fs in os.walk(sys.argv[3]) for f in fs if f.endswith(".jsonl")]
assert not logs, f"per-step logs not gzipped in the results: {logs}"
PY
echo PASS
