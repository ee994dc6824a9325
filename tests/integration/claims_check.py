#!/usr/bin/python3
"""analysis/claims.py on a fabricated two-seed campaign whose verdicts are known by construction:
(a) held for GloFND (filtered fraction 0.011 / 0.009 at alpha 0.01, from epoch 2 on), not held for
glofnd_exact; (b) held (lambda error below FNC's on both seeds, from epoch 2 on in the per-epoch
simstat summaries); (c) inconclusive (the F1 ranges overlap);
(d) not held (GRIT q=1's rate below uniform's); (e) held (q falls on both seeds); (f) missing
data (no FALCON eval.json). Then the same campaign with one seed's GloFND error raised above FNC's
turns (b) inconclusive, and the Markdown table names every claim.
With FNVLP_REPORT (an fnvlp-report binary) the campaign's report has a claims page: one section
per claim with its verdict and, where the claim has data, its plot.
Usage: claims_check.py SOURCE_DIR [FNVLP_REPORT]
"""
import json
import os
import subprocess
import sys
import tempfile

src = sys.argv[1]
tool = os.path.join(src, "analysis", "claims.py")


def write(path, obj=None, lines=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        if lines is not None:
            f.write("".join(json.dumps(r) + "\n" for r in lines))
        else:
            json.dump(obj, f)


def campaign(root, glofnd_error_s2=0.02):
    tasks = {
        "uniform": {1: {"rate": 0.30, "r1": 1.0}, 2: {"rate": 0.32, "r1": 1.2}},
        "fnc": {1: {"f1": 0.30}, 2: {"f1": 0.40}},
        "glofnd": {1: {"frac": 0.011, "f1": 0.35, "err": 0.01}, 2: {"frac": 0.009, "f1": 0.45,
                                                                  "err": glofnd_error_s2}},
        "glofnd_exact": {1: {"frac": 0.03}, 2: {"frac": 0.04}},
        "grit_q1": {1: {"rate": 0.20, "r1": 1.5}, 2: {"rate": 0.25, "r1": 1.4}},
        "grit_q05": {1: {"rate": 0.22}, 2: {"rate": 0.21}},
        "falcon": {1: {"q": (0.6, 0.4)}, 2: {"q": (0.55, 0.5)}},
    }
    with open(os.path.join(root, "index.tsv"), "w") as f:
        f.write("index\tmethod\tseed\n")
        i = 0
        for m, seeds in tasks.items():
            for s in seeds:
                f.write(f"{i}\t{m}\t{s}\n")
                i += 1
    for m, seeds in tasks.items():
        for s, v in seeds.items():
            d = os.path.join(root, "tasks", f"{m}-s{s}")
            write(os.path.join(d, "task.json"),
                  {"method": m, "seed": s, "overrides": ["negatives.alpha=0.05", "negatives.alpha=0.01"]})
            recs = []
            for epoch in range(3):
                r = {"step": 10 * (epoch + 1), "epoch": epoch, "itc": 1.0}
                if "frac" in v and epoch >= 1:
                    frac = v["frac"] if epoch == 2 else 0.5
                    r.update(filtered_frac_i2t=frac, filtered_frac_t2i=frac)
                if "f1" in v and epoch >= 1:
                    r.update(fn_precision=v["f1"], fn_recall=v["f1"], fn_f1=v["f1"])
                if "rate" in v:
                    r["batch_fn_rate_label"] = v["rate"] if epoch >= 1 else 0.9
                if "q" in v and epoch >= 1:
                    r["q_mean"] = v["q"][epoch - 1]
                recs.append(r)
            write(os.path.join(d, "run", "metrics.jsonl"), lines=recs)
            if "err" in v:
                side = {"glofnd": {"mean_abs_error": v["err"]}, "fnc": {"mean_abs_error": 0.015}}
                write(os.path.join(d, "stats.json"), {"image": side, "text": side})
                # simstat of every epoch export (FNVLP_EPOCH_STATS=1): lambda reaches FNC's error
                # in the last epoch only.
                per = []
                for epoch, err in enumerate((0.3, 0.1, v["err"])):
                    side = {"glofnd": {"mean_abs_error": err, "flagged": 100},
                            "fnc": {"mean_abs_error": 0.015}, "exact": {"flagged": 100},
                            "mean_threshold": 0.5}
                    per.append({"export": f"epoch-{epoch:03d}.h5", "image": side, "text": side})
                write(os.path.join(d, "epoch_stats.jsonl"), lines=per)
            if "r1" in v:
                write(os.path.join(d, "eval.json"), {"txt_r1": v["r1"], "img_r1": v["r1"]})


def run(root):
    out = os.path.join(root, "claims.json")
    md = os.path.join(root, "claims.md")
    subprocess.run([sys.executable, tool, "--campaign", root, "--out", out, "--md", md], check=True,
                   stdout=subprocess.DEVNULL)
    return json.load(open(out)), open(md).read()


with tempfile.TemporaryDirectory() as tmp:
    a = os.path.join(tmp, "a")
    os.makedirs(a)
    campaign(a, glofnd_error_s2=0.012)
    doc, md = run(a)
    got = {k: v["verdict"] for k, v in doc["claims"].items()}
    want = {"a": "held", "b": "held", "c": "inconclusive at this spread", "d": "not held",
            "e": "held", "f": "missing data"}
    assert got == want, f"verdicts {got}, expected {want}"
    assert doc["alpha"] == 0.01, f"alpha {doc['alpha']}: the last negatives.alpha override wins"
    assert doc["claims"]["a"]["data"]["glofnd_exact"]["verdict"] == "not held"
    # Judged at every epoch (analysis/horizon.py): (a) holds from epoch 2 on (0.5 in epoch 1), so
    # does (b) (lambda's error 0.3, 0.1, then below FNC's), the F1 ranges of (c) overlap throughout.
    h = {k: v["horizon"]["verdict"] for k, v in doc["claims"].items() if "horizon" in v}
    assert h == {"a": "holds from epoch 2", "b": "holds from epoch 2",
                 "c": "does not hold by epoch 2"}, h
    assert doc["claims"]["a"]["horizon"]["arms"]["glofnd_exact"]["from_epoch"] is None
    assert "(over epochs: holds from epoch 2)" in md, md
    fa = doc["claims"]["a"]["data"]["glofnd"]["filtered_fraction_last_epoch"]
    assert abs(fa["mean"] - 0.010) < 1e-12 and fa["seeds"] == {"1": 0.011, "2": 0.009}, fa
    for cid in "abcdef":
        assert f"| ({cid}) " in md, f"claim ({cid}) missing from the table"
    if len(sys.argv) > 2:
        rep = os.path.join(tmp, "report")
        subprocess.run([sys.argv[2], "--campaign", a, "--out", rep], check=True,
                       stdout=subprocess.DEVNULL)
        html = open(os.path.join(rep, "report.html")).read()
        for cid, verdict in want.items():
            assert f"<h3>({cid}) " in html and f"Verdict: {verdict}" in html, (cid, verdict)
            png = os.path.join(rep, f"claim_{cid}.png")
            # (f) has R@1 for uniform and GRIT (no FALCON eval.json): a plot without FALCON's bar.
            assert os.path.getsize(png) > 1000 and f'src="claim_{cid}.png"' in html, png
        plotted = json.load(open(os.path.join(rep, "report.json")))["plots"]
        kinds = {p["claim"]: (p["kind"], p.get("x")) for p in plotted if "claim" in p}
        assert kinds["a"] == ("lines", "epoch") and kinds["b"] == ("lines", "epoch"), kinds
        assert "judged at every epoch: holds from epoch 2" in html
        assert sorted(p["claim"] for p in plotted if "claim" in p) == list("abcdef"), plotted
    # The report's sentence (horizon.py --summary): values per seed, the protocol against the
    # paper's, no campaign arm name.
    summ = os.path.join(tmp, "lh.json")
    subprocess.run([sys.executable, os.path.join(src, "analysis", "horizon.py"), "--campaign", a,
                    "--tsv", os.path.join(tmp, "h.tsv"), "--md", os.path.join(tmp, "h.md"),
                    "--summary", summ], check=True, stdout=subprocess.DEVNULL)
    sentence = json.load(open(summ))["sentence"]
    assert "filtered seed 1 0.0110, seed 2 0.0090 of the in-batch negatives" in sentence, sentence
    assert "bias correction by each anchor's visit count" in sentence, sentence
    assert "lambda_0 1.0 from epoch 0, alpha 0.01" in sentence, sentence
    assert "glofnd_" not in sentence and "uniform" not in sentence, sentence
    b = os.path.join(tmp, "b")
    os.makedirs(b)
    campaign(b, glofnd_error_s2=0.02)
    doc, _ = run(b)
    assert doc["claims"]["b"]["verdict"] == "inconclusive at this spread", doc["claims"]["b"]
# A campaign of one glofnd_* arm (e.g. fidelity_synth_long_paper.yaml): alpha is that arm's.
sys.path.insert(0, os.path.join(src, "analysis"))
import claims as C  # noqa: E402
import horizon as H  # noqa: E402
# An arm in words from its overrides (what the report says instead of the campaign's name).
paper = H.arm_label({"negatives.method": "glofnd", "negatives.start_epoch": "16",
                     "negatives.glofnd.init": "1.0", "negatives.glofnd.bias_correction": "epoch"})
assert paper == "GloFND with lambda_0 1.0 from epoch 16, Adam's bias correction by epoch (the authors' rule)", paper
frozen = H.arm_label({"negatives.glofnd.exact_init": "true", "negatives.glofnd.reanchor_every": "1",
                      "negatives.glofnd.lr": "1.0e-9"})
assert frozen == "lambda held at the exact quantile of each epoch's export", frozen
row = {"ff_batch": 0.5, "lam_err": None, "fnc_err": None, "f1_batch": None}
d = {"glofnd": {1: {0: row}}, "glofnd_paper": {1: {0: dict(row, ff_batch=0.01)}}}
v = H.verdicts(d, 0.01, {"glofnd_paper": paper})["a"]["verdict"]
assert v == f"does not hold by epoch 0; holds only for {paper} (from epoch 0)", v
with tempfile.TemporaryDirectory() as tmp:
    t = os.path.join(tmp, "glofnd_paper-s1")
    write(os.path.join(t, "task.json"), {"method": "glofnd_paper", "seed": 1,
                                          "overrides": ["negatives.alpha=0.05"]})
    assert C.alpha_of({"glofnd_paper": {1: t}}, 0.01) == 0.05
# A campaign of the authors' protocol (glofnd_authors_long.yaml's shape): the sentence judges the
# arm --main names, says the protocol is the paper's, gives the held arm's error as the quantile's
# drift and retrieval against the run without a filter, and names no arm.
with tempfile.TemporaryDirectory() as tmp:
    g = "negatives.glofnd."
    arms = {"glofnd_authors": ["negatives.method=glofnd", "negatives.alpha=0.125",
                               "negatives.start_epoch=1", g + "init=1.0", g + "bias_correction=epoch"],
            "glofnd_frozen": ["negatives.method=glofnd", "negatives.alpha=0.125",
                              g + "exact_init=true", g + "reanchor_every=1", g + "lr=1.0e-9"],
            "uniform": []}
    with open(os.path.join(tmp, "index.tsv"), "w") as f:
        f.write("index\tmethod\tseed\n")
        for i, (m, s) in enumerate((m, s) for m in arms for s in (1, 2)):
            f.write(f"{i}\t{m}\t{s}\n")
    for m, ov in arms.items():
        for s in (1, 2):
            d = os.path.join(tmp, "tasks", f"{m}-s{s}")
            write(os.path.join(d, "task.json"), {"method": m, "seed": s, "overrides": ov})
            write(os.path.join(d, "run", "metrics.jsonl"), lines=[
                {"step": 10 * (e + 1), "epoch": e, "itc": 1.0, "batch_fn_rate_label": 0.12,
                 "filtered_frac_i2t": 0.1 * s, "filtered_frac_t2i": 0.1 * s} for e in range(3)])
            err = {"glofnd_authors": 0.02, "glofnd_frozen": 0.004 + 0.001 * s}.get(m)
            if err is not None:
                side = {"glofnd": {"mean_abs_error": err, "flagged": 100}, "exact": {"flagged": 100},
                        "fnc": {"mean_abs_error": 0.03}, "mean_threshold": 0.5}
                write(os.path.join(d, "epoch_stats.jsonl"), lines=[
                    {"export": f"epoch-{e:03d}.h5", "image": side, "text": side} for e in range(3)])
            write(os.path.join(d, "eval.json"),
                  {"r_mean": 20.0 + s if m == "glofnd_authors" else 19.0 + s})
    summ = os.path.join(tmp, "lh.json")
    subprocess.run([sys.executable, os.path.join(src, "analysis", "horizon.py"), "--campaign", tmp,
                    "--tsv", os.path.join(tmp, "h.tsv"), "--md", os.path.join(tmp, "h.md"),
                    "--summary", summ, "--main", "glofnd_authors"], check=True,
                   stdout=subprocess.DEVNULL)
    doc = json.load(open(summ))
    sentence = doc["sentence"]
    for want in ("lambda_0 1.0 from epoch 1, alpha 0.125 (same-label share of a batch's negatives "
                 "0.120), Adam's bias correction by epoch, as the authors' code; the paper's protocol",
                 "filtered seed 1 0.1000, seed 2 0.2000 of the in-batch negatives",
                 "a lambda held at each epoch's exact quantile was seed 1 0.0050, seed 2 0.0060 from "
                 "the next epoch's", "against the same training without it: seed 1 21.00 against "
                 "20.00, seed 2 22.00 against 21.00", "(b) holds from epoch 0",
                 "(c) not judged (no FNC arm beside it)"):
        assert want in sentence, (want, sentence)
    assert "glofnd_" not in sentence and "uniform" not in sentence, sentence
    # The arm without a filter has no filtered fraction or lambda of its own in the table.
    tsv = [line.split("\t") for line in open(os.path.join(tmp, "h.tsv")).read().splitlines()]
    uni = [r for r in tsv if r[0] == "uniform"]
    assert all(r[3] == "" and r[5] == "" for r in uni), uni
print("ok   claims.py: the six verdicts of a fabricated campaign, and (b) turning inconclusive")
print("ok   horizon.py: the sentence of an authors'-protocol campaign")
