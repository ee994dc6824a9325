#!/usr/bin/env python3
"""Compares two fnvlp-simstat STATS.h5 files dataset by dataset, bit for bit (NaN included).

  stats_bits.py A.h5 B.h5   prints each dataset that differs and a summary line; exit 1 if any
"""
import sys

import h5py

a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = sorted(set(a.keys()) | set(b.keys()))
bad = [k for k in names
       if k not in a or k not in b or a[k].shape != b[k].shape
       or a[k][()].tobytes() != b[k][()].tobytes()]
for k in bad:
    print(f"differs: {k}")
print(f"{len(names) - len(bad)} of {len(names)} datasets identical bit for bit")
sys.exit(1 if bad else 0)
