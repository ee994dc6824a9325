#!/usr/bin/python3
"""Draws the PNGs of fnvlp-report from data/plots.json (Debian python3-matplotlib, no network).

Each plot entry names a CSV under the data directory and a kind: "lines" (x against several y
columns, optional horizontal reference line), "scatter" (optional y = x diagonal), "hist",
"histogram" (bins counted already: columns lo, hi, count) or "bars" (one group of bars per CSV
row, one bar per series with columns mean_S and std_S drawn as mean +- std; a NaN mean leaves its
bar out).
"""
import csv
import json
import math
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError as e:  # a clear error instead of a traceback
    sys.exit("plots.py: matplotlib is missing (apt-get install python3-matplotlib): %s" % e)


def columns(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return {}
    return {k: [float(r[k]) for r in rows] for k in rows[0]}


def finite_pairs(xs, ys):
    pts = [(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)]
    return [p[0] for p in pts], [p[1] for p in pts]


def draw(spec, data_dir, out_dir):
    cols = columns("%s/%s" % (data_dir, spec["csv"]))
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    kind = spec["kind"]
    if kind == "lines":
        for y in spec["y"]:
            xs, ys = finite_pairs(cols[spec["x"]], cols[y])
            ax.plot(xs, ys, label=y, marker="." if len(xs) < 30 else None)
        if "hline" in spec:
            ax.axhline(spec["hline"]["y"], color="k", ls="--", lw=1, label=spec["hline"]["label"])
        ax.legend(fontsize=8)
    elif kind == "scatter":
        xs, ys = finite_pairs(cols[spec["x"]], cols[spec["y"]])
        ax.scatter(xs, ys, s=4, alpha=0.5)
        if spec.get("diagonal") and xs:
            lo, hi = min(xs + ys), max(xs + ys)
            ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
            ax.legend(fontsize=8)
    elif kind == "hist":
        v = [x for x in cols[spec["column"]] if math.isfinite(x)]
        ax.hist(v, bins=spec.get("bins", 50))
    elif kind == "histogram":  # counted already: one row per bin (lo, hi, count)
        lo, hi = cols.get("lo", []), cols.get("hi", [])
        ax.bar(lo, cols.get("count", []), width=[b - a for a, b in zip(lo, hi)], align="edge")
    elif kind == "bars":
        groups, series = spec["groups"], spec["series"]
        width = 0.8 / len(series)
        for j, name in enumerate(series):
            xs, means, stds = [], [], []
            for i, mean in enumerate(cols["mean_" + name]):
                if math.isfinite(mean):
                    xs.append(i + (j - (len(series) - 1) / 2) * width)
                    means.append(mean)
                    stds.append(cols["std_" + name][i])
            ax.bar(xs, means, width, yerr=stds, capsize=3, label=name)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups, fontsize=8)
        if len(series) > 1:
            ax.legend(fontsize=8)
    else:
        sys.exit("plots.py: unknown plot kind %r in %s" % (kind, spec["file"]))
    ax.set_title(spec["title"], fontsize=10)
    ax.set_xlabel(spec.get("xlabel", ""))
    ax.set_ylabel(spec.get("ylabel", ""))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig("%s/%s" % (out_dir, spec["file"]))
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plots.py REPORT_DIR/data/plots.json")
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    for p in spec["plots"]:
        draw(p, spec["data"], spec["out"])


if __name__ == "__main__":
    main()
