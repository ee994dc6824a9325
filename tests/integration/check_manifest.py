#!/usr/bin/env python3
"""Asserts a dataset manifest's counts (integration tests)."""
import argparse
import json
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--pairs", type=int, required=True)
ap.add_argument("--images", type=int, required=True)
ap.add_argument("--rejects", type=int)
ap.add_argument("--filtered", type=int)
a = ap.parse_args()
m = json.load(open(os.path.join(a.dir, "manifest.json")))
checks = [("num_pairs", m["num_pairs"], a.pairs), ("num_images", m["num_images"], a.images),
          ("pairs over shards", sum(s["num_pairs"] for s in m["shards"]), a.pairs),
          ("images stored", sum(s["num_images"] for s in m["shards"]), a.images)]
if a.rejects is not None:
    checks.append(("rejects", m["rejects"]["total"], a.rejects))
if a.filtered is not None:
    checks.append(("filtered by split", m["records"]["filtered_by_split"], a.filtered))
bad = [c for c in checks if c[1] != c[2]]
for name, got, want in checks:
    print("%-18s %8d  (expected %d)%s" % (name, got, want, "  MISMATCH" if got != want else ""))
sys.exit(1 if bad else 0)
