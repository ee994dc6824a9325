#!/usr/bin/env bash
# Groundwork for issue 30: the PyTorch twin of one fnvlp training step
# (tests/bench/pytorch_albef.py) on one GPU with PyTorch 2.x, matrix {tiny, small, base}
# (jobs/configs) x {fp32, bf16} x {eager, best, torch.compile}, on a synthetic batch of each preset's
# shapes (--synthetic: no shards, no network). Needs python3 with torch alone: PyYAML, numpy,
# PIL and h5py are optional.
#
# Usage, from the repository root:  bash tests/bench/gpu_twin.sh
# One JSON line per cell (pytorch_albef.py's, plus preset, status and cell_s; skipped or failed
# cells say why) goes to $OUT/gpu_twin.jsonl when OUT is set, each cell's stderr tail to
# $OUT/gpu_twin.log; a table ends the output.
#
# Batch sizes: the configs' batch (train.batch_size: 32 for all three, fnvlp's default), plus 256
# for tiny and small, whose 32 pairs leave an H100 mostly idle (analytic FLOPs per pair and step:
# tiny 0.6 G, small 4.4 G, base 236 G, i.e. 7.5 TFLOP per step for base at 32).
# Cells run most wanted first, so that the time budget cuts the least wanted:
#   1. eager, config batch: tiny, small, base x fp32, bf16
#   2. eager, larger batch: tiny 256, small 256 x fp32, bf16
#   3. best (bf16 only: pytorch_albef.py --best, i.e. SDPA + fused AdamW + torch.compile), config
#      batch then larger batch
#   4. compile, config batch: bf16 then fp32, tiny, small, base
#   5. compile, larger batch: bf16 then fp32
# Each cell is a fresh process: 3 untimed steps (5 with torch.compile: the first step compiles,
# the second recompiles the MLM head for a dynamic count of masked tokens), 20 timed ones (torch.cuda.synchronize() around each), then one eager step under
# FlopCounterMode (PyTorch >= 2.1) as a check of the analytic FLOP count that MFU uses.
# MFU peaks (dense, H100 SXM): bf16 989 TFLOP/s; fp32 67 (PyTorch's default fp32 matmuls run
# without TF32, on the non-tensor-core units; cuDNN's convolution, the patch embedding only,
# uses TF32 by default), or 494 with FNVLP_TWIN_TF32=1 (--tf32: TF32 matmuls as well).
#
# Methods (FNVLP_TWIN_METHODS, default "uniform"): each cell runs once per method listed
# (pytorch_albef.py --method uniform|glofnd|momentum, its defaults: GloFND alpha 0.01, momentum
# queue 65536), a cell's methods one after the other, so that the budget cuts whole cells. Every
# JSON line carries its "method"; the name and the table's mode column add it when it is not
# uniform (e.g. "best/glofnd"), so a uniform-only run prints as before.
#
# Time: no cell starts once the budget (450 s) is nearly spent (eager cells need 15 s of it left,
# compiled ones 45 s), and a running cell is killed at its time box (eager 120 s, compiled 240 s)
# or at the budget's end, whichever comes first: the whole run ends within about 460 s.
#
# Environment (all optional):
#   FNVLP_TWIN_DEVICE (cuda; cpu: a dry run of the driver), FNVLP_TWIN_PRESETS ("tiny small base"),
#   FNVLP_TWIN_PRECISIONS ("fp32 bf16"), FNVLP_TWIN_MODES ("eager compile"; "best" adds the
#   best-PyTorch cells),
#   FNVLP_TWIN_BIG_BATCH ("tiny:256 small:256"; empty: config batches only), FNVLP_TWIN_BEST
#   (PRESET:BATCH cells of mode best, e.g. "base:32 base:64"; unset: all), FNVLP_TWIN_METHODS
#   ("uniform"; e.g. "uniform glofnd momentum"), FNVLP_TWIN_FIRST (PRESET:BATCH:PRECISION:MODE
#   or PRESET:BATCH:PRECISION:MODE:METHOD cells run first, in that order), FNVLP_TWIN_STEPS (20),
#   FNVLP_TWIN_WARMUP (3), FNVLP_TWIN_COMPILE_WARMUP (5), FNVLP_TWIN_BUDGET (450),
#   FNVLP_TWIN_CELL_LIMIT (120), FNVLP_TWIN_COMPILE_LIMIT (240), FNVLP_TWIN_TF32 (0),
#   FNVLP_TWIN_PEAK_BF16 (989), FNVLP_TWIN_PEAK_FP32 (67, or 494 with TF32),
#   FNVLP_TWIN_COMPILE_BACKEND (inductor), PYTHON (python3).
#   CPU dry run (PYTHON=/usr/bin/python3 for Debian's PyTorch 1.13: compiled cells skipped):
#     FNVLP_TWIN_DEVICE=cpu FNVLP_TWIN_PRESETS=tiny FNVLP_TWIN_STEPS=2 FNVLP_TWIN_WARMUP=1 \
#     FNVLP_TWIN_BIG_BATCH= bash tests/bench/gpu_twin.sh
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the header above
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-python3}
command -v "$py" >/dev/null || { echo "gpu_twin: no $py on PATH (set PYTHON)" >&2; exit 2; }
"$py" -c "import torch" 2>/dev/null || { echo "gpu_twin: $py cannot import torch" >&2; exit 2; }
export FNVLP_TWIN_ROOT=$root FNVLP_TWIN_OUT=${OUT:-}
exec "$py" - <<'PY'
import json, os, signal, subprocess, sys, tempfile, time

t_start = time.monotonic()
env = os.environ.get
root = env("FNVLP_TWIN_ROOT")
device = env("FNVLP_TWIN_DEVICE", "cuda")
presets = env("FNVLP_TWIN_PRESETS", "tiny small base").split()
precisions = env("FNVLP_TWIN_PRECISIONS", "fp32 bf16").split()
modes = env("FNVLP_TWIN_MODES", "eager compile").split()
methods = env("FNVLP_TWIN_METHODS", "uniform").split()
METHODS = ("uniform", "glofnd", "momentum")
if not methods or any(m not in METHODS for m in methods):
    sys.exit("gpu_twin: FNVLP_TWIN_METHODS: one or more of %s, not %r" % (" ".join(METHODS),
                                                                          " ".join(methods)))
big = dict(x.split(":") for x in env("FNVLP_TWIN_BIG_BATCH", "tiny:256 small:256").split())
# "best" cells only for these PRESET:BATCH (unset: every bf16 cell): each compiles for a minute.
best_only = env("FNVLP_TWIN_BEST")
best_only = set(best_only.split()) if best_only is not None else None
steps, warmup = int(env("FNVLP_TWIN_STEPS", "20")), int(env("FNVLP_TWIN_WARMUP", "3"))
compile_warmup = int(env("FNVLP_TWIN_COMPILE_WARMUP", "5"))
budget = float(env("FNVLP_TWIN_BUDGET", "450"))
limits = {"eager": float(env("FNVLP_TWIN_CELL_LIMIT", "120")),
          "compile": float(env("FNVLP_TWIN_COMPILE_LIMIT", "240"))}
limits["best"] = limits["compile"]
min_start = {"eager": 15.0, "compile": 45.0, "best": 45.0}  # no cell starts with less budget
tf32 = env("FNVLP_TWIN_TF32", "0") == "1"
peaks = {"bf16": float(env("FNVLP_TWIN_PEAK_BF16", "989")),
         "fp32": float(env("FNVLP_TWIN_PEAK_FP32", "494" if tf32 else "67"))}
backend = env("FNVLP_TWIN_COMPILE_BACKEND", "inductor")
out_dir = env("FNVLP_TWIN_OUT") or tempfile.mkdtemp(prefix="fnvlp_gpu_twin.")
os.makedirs(out_dir, exist_ok=True)
jsonl, log = os.path.join(out_dir, "gpu_twin.jsonl"), os.path.join(out_dir, "gpu_twin.log")
script = os.path.join(root, "tests", "bench", "pytorch_albef.py")

# The driver holds no CUDA context of its own: a short probe process reports the setup.
PROBE = """
import importlib.util, json, sys, torch
info = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
        "compile": hasattr(torch, "compile"), "cuda_available": torch.cuda.is_available(),
        "optional_modules": {m: importlib.util.find_spec(m) is not None
                             for m in ("yaml", "numpy", "PIL", "h5py")}}
if info["cuda_available"]:
    info["device_name"] = torch.cuda.get_device_name()
    info["memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
print(json.dumps(info))
"""
probe = subprocess.run([sys.executable, "-c", PROBE], text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
if probe.returncode != 0:
    sys.exit("gpu_twin: the PyTorch probe failed:\n" + probe.stderr)
info = json.loads(probe.stdout.strip().splitlines()[-1])
info.update(device=device, budget_s=budget)
print("gpu_twin:", json.dumps(info), flush=True)
if device == "cuda":
    if not info["cuda_available"]:
        sys.exit("gpu_twin: torch.cuda.is_available() is False (PyTorch %s, CUDA %s)"
                 % (info["torch"], info["cuda"]))
    name = info["device_name"]
    if not ("H100" in name or "H200" in name) or "PCIe" in name:  # H200: the H100 SXM's peaks
        print("gpu_twin: the MFU peaks are H100 SXM's (bf16 %g, fp32 %g TFLOP/s): set "
              "FNVLP_TWIN_PEAK_BF16/FP32 for this GPU" % (peaks["bf16"], peaks["fp32"]),
              flush=True)

sys.path.insert(0, os.path.dirname(script))
from pytorch_albef import load_config  # noqa: E402  (imports torch, creates no CUDA context)

configs = {p: os.path.join(root, "jobs", "configs", p + ".yaml") for p in presets}
batch_cfg = {p: load_config(configs[p])["train"]["batch_size"] for p in presets}  # all 32 now
cells = []  # (preset, batch, precision, mode, method), most wanted first
MODES = ("eager", "best", "compile")
for mode in [m for m in MODES if m in modes]:
    # compile: bf16 cells before fp32 ones, the budget cutting fp32 first; best: bf16 only
    precs = sorted(precisions, key=lambda p: p != "bf16") if mode == "compile" else precisions
    if mode == "best":
        precs = [p for p in precs if p == "bf16" or device != "cuda"]
    for size in ("config", "big"):
        groups = [[p] for p in precs] if mode != "eager" else [precs]
        for group in groups:
            for preset in presets:
                batch = batch_cfg[preset] if size == "config" else big.get(preset)
                for prec in group:
                    if batch is None or (mode == "best" and best_only is not None and
                                         "%s:%s" % (preset, batch) not in best_only):
                        continue
                    cells.extend((preset, int(batch), prec, mode, m) for m in methods)

# FNVLP_TWIN_FIRST: PRESET:BATCH:PRECISION:MODE[:METHOD] cells moved to the front, in that order
# (the comparisons a caller needs most, e.g. the best step at ALBEF's batch, before the budget runs
# out); without METHOD, the cell's every method.
first = []
for x in env("FNVLP_TWIN_FIRST", "").split():
    p, b, pr, m, *meth = x.split(":")
    first += [(p, int(b), pr, m, me) for me in (meth or methods)
              if (p, int(b), pr, m, me) in cells and (p, int(b), pr, m, me) not in first]
cells = first + [c for c in cells if c not in first]

open(jsonl, "w").close()
with open(log, "w") as f:
    f.write("gpu_twin: %s\n" % json.dumps(info))
rows = []


def record(row):
    rows.append(row)
    with open(jsonl, "a") as f:
        f.write(json.dumps(row) + "\n")


def mode_name(mode, method):
    return mode if method == "uniform" else "%s/%s" % (mode, method)


for preset, batch, prec, mode, method in cells:
    cell = {"preset": preset, "batch": batch, "precision": prec, "mode": mode,
            "compile": mode != "eager", "method": method}
    name = "%s b%d %s %s" % (preset, batch, prec, mode_name(mode, method))
    left = budget - (time.monotonic() - t_start)
    if mode != "eager" and not info["compile"]:
        record(dict(cell, status="skipped", reason="torch.compile needs PyTorch >= 2.0, this is "
                    + info["torch"]))
        print("%-26s skipped: torch.compile needs PyTorch >= 2.0" % name, flush=True)
        continue
    if left < min_start[mode]:
        record(dict(cell, status="skipped", reason="time budget: %.0f s left of %.0f, %s cells "
                    "start with %.0f s or more" % (left, budget, mode, min_start[mode])))
        print("%-26s skipped: %.0f s of the %.0f s budget left" % (name, left, budget), flush=True)
        continue
    limit = min(limits[mode], left)
    cmd = [sys.executable, script, "--config", configs[preset],
           "--mode", "compute", "--synthetic", "--device", device, "--precision", prec,
           "--batch-size", str(batch), "--steps", str(steps),
           "--warmup", str(warmup if mode == "eager" else compile_warmup), "--method", method]
    if mode == "compile":
        cmd += ["--compile", "--compile-backend", backend]
    if mode == "best":
        cmd += ["--best", "--compile-backend", backend]
    if device == "cuda":
        cmd += ["--peak-tflops", str(peaks[prec])] + (["--tf32"] if tf32 else [])
    t0 = time.monotonic()
    # Own session: a cell killed at its limit takes its compile workers with it.
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=limit)
        status = "ok" if proc.returncode == 0 else "error"
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended meanwhile
            pass
        stdout, stderr = proc.communicate()
        status = "timeout"
    secs = time.monotonic() - t0
    tail = stderr.strip().splitlines()[-30:]
    with open(log, "a") as f:
        f.write("=== %s: %s, %.1f s\n$ %s\n%s\n" % (name, status, secs, " ".join(cmd),
                                                    "\n".join(tail)))
    result = None
    if status == "ok":
        try:
            result = json.loads(stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            status = "error"
    if status == "ok":
        record(dict(result, preset=preset, mode=mode, method=method, status="ok", cell_s=secs))
        print("%-26s %8.2f ms/step %9.1f samples/s  (%.0f s)" % (
            name, result["ms_per_step"], result["samples_per_s"], secs), flush=True)
    elif status == "timeout":
        record(dict(cell, status="timeout", cell_s=secs,
                    reason="killed at its time box of %.0f s (%d warm-up steps%s)"
                           % (limit, warmup if mode == "eager" else compile_warmup,
                              "" if mode == "eager" else ", compilation included")))
        print("%-26s timeout: killed after %.0f s" % (name, secs), flush=True)
    else:
        record(dict(cell, status="error", rc=proc.returncode, cell_s=secs,
                    reason=tail[-1] if tail else "no output"))
        print("%-26s error (rc %s): %s" % (name, proc.returncode, tail[-1] if tail else ""),
              flush=True)


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"


print("\npreset x precision x mode%s, %s, PyTorch %s, %d timed steps; %s" % (
    "" if methods == ["uniform"] else " x method", info.get("device_name", device)
    if device == "cuda" else "CPU", info["torch"], steps, jsonl))
print("| preset | batch | precision | mode | ms/step | samples/s | TFLOP/s | MFU | peak GiB "
      "| warm-up s | status |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in sorted(rows, key=lambda r: (presets.index(r["preset"]), r["batch"],
                                     precisions.index(r["precision"]), MODES.index(r["mode"]),
                                     methods.index(r["method"]))):
    print("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        r["preset"], r["batch"], r["precision"], mode_name(r["mode"], r["method"]),
        fmt(r.get("ms_per_step"), ".2f"), fmt(r.get("samples_per_s"), ".1f"),
        fmt(r.get("tflops_per_s"), ".1f"),
        fmt(100 * r["mfu"], ".1f") + "%" if r.get("mfu") is not None else "-",
        fmt(r.get("peak_mem_gib"), ".2f"), fmt(r.get("warmup_s"), ".1f"),
        r["status"] if r["status"] == "ok" else "%s: %s" % (r["status"], r.get("reason", ""))))
print("MFU: analytic model FLOPs (pytorch_albef.model_flops) against %g TFLOP/s (bf16) and %g "
      "(fp32%s); warm-up s: the untimed steps, compilation included; %.0f s in all"
      % (peaks["bf16"], peaks["fp32"], ", TF32" if tf32 else " without TF32",
         time.monotonic() - t_start))
PY
