#!/usr/bin/env python3
"""Sums a PyTorch profiler (Kineto) Chrome trace: where a profiled window of training steps spent
its time (fnvlp-pretrain's train.profile_steps, or torch.profiler's export_chrome_trace).

GPU: kernels, copies and memsets, their busy time as the union of their intervals against the
window (first to last event), so `gpu_idle` is the share of the window with nothing running on
the device: host-bound steps show it. Host: the CUDA runtime calls (launch counts, time blocked
in synchronising calls) and the operators that take the most inclusive time at the top level.

Usage: trace_summary.py TRACE.json[.gz] [--steps N] [--top K] [--json OUT]
"""
import argparse
import collections
import gzip
import json
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def union_length(intervals):
    total, end = 0.0, None
    start = None
    for a, b in sorted(intervals):
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        else:
            end = max(end, b)
    if end is not None:
        total += end - start
    return total


def top_level(events):
    """The operators not inside another operator of the same thread."""
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    out = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        end = -1.0
        for e in evs:
            if e["ts"] >= end:
                out.append(e)
                end = e["ts"] + e["dur"]
    return out


SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def summarise(events, steps, top):
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    if not spans:
        raise SystemExit("no complete events in the trace")
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e["dur"] for e in spans)
    window = t1 - t0
    gpu = [e for e in spans if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    kernels = [e for e in spans if e.get("cat") == "kernel"]
    runtime = [e for e in spans if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    ops = [e for e in spans if e.get("cat", "cpu_op") == "cpu_op"]  # 1.13 writes no cat
    per = lambda x: x / steps
    s = {"window_ms": window / 1e3, "steps": steps, "window_ms_per_step": per(window) / 1e3}
    if gpu:
        s["copies_to_host_per_step"] = per(
            sum(e.get("cat") == "gpu_memcpy" and "DtoH" in e["name"] for e in gpu))
        busy = union_length([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
        s["gpu_busy_ms_per_step"] = per(busy) / 1e3
        s["gpu_idle"] = 1 - busy / window
        s["kernels_per_step"] = per(len(kernels))
        by = collections.defaultdict(lambda: [0, 0.0])
        for e in gpu:
            name = e["name"] if e.get("cat") == "kernel" else e["cat"]
            by[name][0] += 1
            by[name][1] += e["dur"]
        s["top_kernels"] = [
            {"name": n[:120], "calls_per_step": per(c), "ms_per_step": per(d) / 1e3,
             "share_of_busy": d / busy}
            for n, (c, d) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]]
    if runtime:
        # Each is the host waiting for the GPU (a read back: .item(), a copy to the host, a
        # blocking copy to the device); a host-bound step wants none.
        s["syncs_per_step"] = per(sum(e["name"] in SYNCS for e in runtime))
        by = collections.defaultdict(lambda: [0, 0.0])
        for e in runtime:
            by[e["name"]][0] += 1
            by[e["name"]][1] += e["dur"]
        s["runtime_calls"] = [
            {"name": n, "calls_per_step": per(c), "ms_per_step": per(d) / 1e3}
            for n, (c, d) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]]
    if ops:
        s["ops_per_step"] = per(len(ops))
        by = collections.defaultdict(lambda: [0, 0.0])
        for e in top_level(ops):
            by[e["name"]][0] += 1
            by[e["name"]][1] += e["dur"]
        s["top_level_ops"] = [
            {"name": n, "calls_per_step": per(c), "ms_per_step": per(d) / 1e3}
            for n, (c, d) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]]
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=1, help="profiled steps (figures per step)")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--json", help="write the summary here too")
    a = ap.parse_args()
    s = summarise(load(a.trace), max(a.steps, 1), a.top)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)
    w = sys.stdout.write
    w("window %.2f ms/step over %d steps" % (s["window_ms_per_step"], s["steps"]))
    if "gpu_idle" in s:
        w(", GPU busy %.2f ms/step (idle %.0f%%), %.0f kernels/step"
          % (s["gpu_busy_ms_per_step"], 100 * s["gpu_idle"], s["kernels_per_step"]))
    if "ops_per_step" in s:
        w(", %.0f host ops/step" % s["ops_per_step"])
    if "syncs_per_step" in s:
        w(", %.1f host waits/step" % s["syncs_per_step"])
    if "copies_to_host_per_step" in s:
        w(", %.1f copies to the host/step" % s["copies_to_host_per_step"])
    w("\n")
    for key, label in (("top_kernels", "GPU"), ("runtime_calls", "CUDA runtime"),
                       ("top_level_ops", "host operators (top level, inclusive)")):
        if key in s:
            w("%s:\n" % label)
            for r in s[key]:
                w("  %8.3f ms/step %7.1f calls/step  %s\n"
                  % (r["ms_per_step"], r["calls_per_step"], r["name"]))


if __name__ == "__main__":
    main()
