#!/usr/bin/env python3
"""What one fnvlp-pretrain step sends between ranks: a model of the payload per rank, checked against
the bytes a run logged, and its cost at 8 to 256 GPUs.

Payload per rank and step (R ranks, b pairs per rank, N = R b, E = embed_dim, P parameters):
  all-reduce  4 P            the flat fp32 gradient (comm/flat_gradients, or NCCL buckets)
              2 N E 4        ITC's cross-rank gradient sums of the gathered image and text features
              4              the agreement on a finite loss (train/trainer: all_finite)
  all-gather  2 N E 4        the image and text features, one gather (train/step.cpp:
                             gather_embeddings, comm/tensors: allgather_rows)
              2 N 8          image_id and label of the global batch, one exchange on the host
                             (gather_ids_and_labels)
              16 R           row counts of those two gathers on the MPI path (4 R with NCCL:
                             the features' rows are the batch size, known to every rank)
At one rank nothing is sent. On the wire a ring all-reduce sends 2 (R - 1) / R of its buffer per
rank and a ring all-gather (R - 1) / R of its result; a reduce-scatter, which is all the cross-rank
sums need (each rank keeps its own b rows), sends (R - 1) / R of it.

Usage:
  comm_model.py scaling CONFIG --compute-ms MS --batch B [--nodes N] [--gpus-per-node G]
                               [--intra-gbs GB/s] [--inter-gbs GB/s] [--method-ms MS]
                                                  a job's expected step and scaling efficiency:
                                                  the gradient all-reduce exposed after the
                                                  backward (eager over NCCL without buckets) or
                                                  overlapped with it (buckets captured in the
                                                  step's CUDA graph), on paper
  comm_model.py check METRICS.jsonl CONFIG R B [--backend nccl]
                                                  the run's comm_bytes_per_step against the model
                                                  (exactly, unless --tolerance)
  comm_model.py table CONFIG [--batch B ...] [--compute-ms MS ...] [--compute-batch B0]
                                                  [--bus-gbs GB/s ...]
compute-ms: a step's computation at batch compute-batch per GPU (scaled linearly to each b).
P comes from the PyTorch twin of the model (pytorch_albef.py: the same parameter count as fnvlp's,
Albef.BasePresetRunsOneStepOnCpu prints fnvlp's).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_albef as twin  # noqa: E402


def parameters(model_cfg):
    import torch

    try:  # torch >= 2.0: no memory for the weights
        with torch.device("meta"):
            net = twin.Albef(model_cfg)
    except (AttributeError, TypeError, RuntimeError):
        net = twin.Albef(model_cfg)
    return sum(p.numel() for p in net.parameters())


def payload(P, E, R, b, backend="mpi"):
    """Payload bytes per rank and step by collective kind (see the module's docstring)."""
    if R == 1:
        return {"allreduce": 0, "allgather": 0, "grads": 0, "feature_grad_sums": 0}
    N = R * b
    grads, sums = 4 * P, 2 * N * E * 4
    counts = 16 * R if backend == "mpi" else 4 * R
    return {
        "allreduce": grads + sums + 4,
        "allgather": 2 * N * E * 4 + 2 * N * 8 + counts,
        "grads": grads,
        "feature_grad_sums": sums,
    }


def wire(p, R, reduce_scatter=False):
    """Bytes each rank sends per step with ring collectives."""
    if R == 1:
        return 0.0
    ar = p["grads"] + (0 if reduce_scatter else p["feature_grad_sums"])
    rs = p["feature_grad_sums"] if reduce_scatter else 0
    return 2 * (R - 1) / R * ar + (R - 1) / R * (rs + p["allgather"])


def check(args):
    cfg = twin.load_config(args.config)
    P, E = parameters(cfg["model"]), cfg["model"]["embed_dim"]
    want = payload(P, E, args.ranks, args.batch, args.backend)
    rows = [json.loads(line) for line in open(args.metrics)]
    got = [r["comm_bytes_per_step"] for r in rows if "comm_bytes_per_step" in r]
    if not got:
        sys.exit(f"{args.metrics}: no comm_bytes_per_step")
    print(f"{args.config}: P = {P:,} parameters, E = {E}, R = {args.ranks}, b = {args.batch}")
    status = 0
    for kind in ("allreduce", "allgather"):
        measured = statistics.median(g[kind] for g in got)
        ratio = measured / want[kind] if want[kind] else float("nan")
        print(f"  {kind}: logged {measured:,.0f} B/step (median of {len(got)} windows), "
              f"model {want[kind]:,} B, logged/model {ratio:.6f}")
        if want[kind] and abs(ratio - 1) > args.tolerance:
            status = 1
    return status


def table(args):
    cfg = twin.load_config(args.config)
    P, E = parameters(cfg["model"]), cfg["model"]["embed_dim"]
    mb = 1e6
    print(f"{args.config}: P = {P:,} parameters (fp32 gradient {4 * P / mb:.1f} MB), E = {E}\n")
    print("| GPUs | b | all-reduce payload MB | all-gather payload MB | sent per GPU MB (ring) "
          "| ... with a reduce-scatter for the feature sums | feature share of sent |")
    print("|---|---|---|---|---|---|---|")
    for b in args.batch:
        for R in args.ranks:
            p = payload(P, E, R, b)
            w, w_rs = wire(p, R), wire(p, R, reduce_scatter=True)
            feat = w - 2 * (R - 1) / R * p["grads"]
            print(f"| {R} | {b} | {p['allreduce'] / mb:.1f} | {p['allgather'] / mb:.2f} | "
                  f"{w / mb:.1f} | {w_rs / mb:.1f} | {100 * feat / w:.1f}% |")
    print("\nTime on the wire per step at each bus bandwidth (bandwidth only, not overlapped with "
          "compute: fnvlp reduces the gradient after the backward pass), and its share of the "
          "step:\n")
    head = " | ".join(f"{bw:g} GB/s" for bw in args.bus_gbs)
    print(f"| GPUs | b | compute ms | {head} |")
    print("|---|---|---|" + "---|" * len(args.bus_gbs))
    for b in args.batch:
        for R in args.ranks:
            w = wire(payload(P, E, R, b), R)
            for c0 in args.compute_ms:
                c = c0 * b / args.compute_batch
                cells = []
                for bw in args.bus_gbs:
                    t = w / (bw * 1e9) * 1e3
                    cells.append(f"{t:.1f} ms ({100 * t / (t + c):.0f}%)")
                print(f"| {R} | {b} | {c:g} | " + " | ".join(cells) + " |")
    print("\nWith the gradient all-reduce overlapped with the backward (comm.bucket_mb, "
          "train/grad_buckets.hpp): the backward, %.0f%% of the compute, hides the buckets it "
          "outlasts; exposed per step = the features' collectives (before and after the backward) "
          "+ max(last bucket of %g MB, gradient time - backward), and its share of the step:\n"
          % (100 * args.backward_share, args.bucket_mb))
    print(f"| GPUs | b | compute ms | {head} |")
    print("|---|---|---|" + "---|" * len(args.bus_gbs))
    for b in args.batch:
        for R in args.ranks:
            p = payload(P, E, R, b)
            grads = 2 * (R - 1) / R * p["grads"]
            rest = wire(p, R) - grads
            last = 2 * (R - 1) / R * min(p["grads"], args.bucket_mb * mb)
            for c0 in args.compute_ms:
                c = c0 * b / args.compute_batch
                cells = []
                for bw in args.bus_gbs:
                    to_ms = 1e3 / (bw * 1e9)
                    t = (rest + max(last, grads - args.backward_share * c / to_ms)) * to_ms
                    cells.append(f"{t:.1f} ms ({100 * t / (t + c):.0f}%)")
                print(f"| {R} | {b} | {c:g} | " + " | ".join(cells) + " |")
    for b in args.batch:
        w = wire(payload(P, E, args.ranks[-1], b), args.ranks[-1])
        for c0 in args.compute_ms:
            c = c0 * b / args.compute_batch
            # comm = 2/3 of the step <=> t = 2 c.
            print(f"\nb = {b}, compute {c:g} ms: communication is two thirds of the step below "
                  f"{w / (2 * c * 1e-3) / 1e9:.1f} GB/s of bus bandwidth at {args.ranks[-1]} GPUs")
    return 0


def scaling(args):
    """The step of a job at nodes x gpus_per_node ranks from a measured one-GPU step, with NCCL's
    ring collectives at a bus bandwidth of intra_gbs inside a node and inter_gbs across nodes (a
    ring that leaves a node carries its whole traffic through the node's NICs: the bus bandwidth
    is the node's network bandwidth)."""
    cfg = twin.load_config(args.config)
    P, E = parameters(cfg["model"]), cfg["model"]["embed_dim"]
    mb = 1e6
    c = args.compute_ms + args.method_ms
    print(f"{args.config}: P = {P:,} parameters (fp32 gradient {4 * P / mb:.0f} MB), E = {E}; "
          f"one GPU's step {args.compute_ms:g} ms at b = {args.batch}"
          + (f" + {args.method_ms:g} ms of the method's own work" if args.method_ms else "")
          + f"; backward {100 * args.backward_share:.0f}% of the compute, buckets of "
          f"{args.bucket_mb:g} MB\n")
    print("| GPUs | bus GB/s | gradient ms | features ms | step, all-reduce after the backward "
          "| step, overlapped (captured buckets) | efficiency after / overlapped |")
    print("|---|---|---|---|---|---|---|")

    def step_ms(nodes):  # (R, bus B/s, gradient ms, feature ms, step after, step overlapped)
        R = nodes * args.gpus_per_node
        bw = (args.inter_gbs if nodes > 1 else args.intra_gbs) * 1e9
        p = payload(P, E, R, args.batch, "nccl")
        grads = 2 * (R - 1) / R * p["grads"] / bw * 1e3
        feats = (wire(p, R) - 2 * (R - 1) / R * p["grads"]) / bw * 1e3
        last = 2 * (R - 1) / R * min(p["grads"], args.bucket_mb * mb) / bw * 1e3
        return (R, bw, grads, feats, c + feats + grads,
                c + feats + max(last, grads - args.backward_share * c))

    for nodes in args.nodes:
        R, bw, grads, feats, after, overlapped = step_ms(nodes)
        print(f"| {nodes} x {args.gpus_per_node} = {R} | {bw / 1e9:g} | {grads:.1f} | {feats:.2f} "
              f"| {after:.1f} ms | {overlapped:.1f} ms | {100 * c / after:.1f}% / "
              f"{100 * c / overlapped:.1f}% |")
    R, _, _, _, _, step = step_ms(args.nodes[-1])
    rate = R * args.batch / (step * 1e-3)
    print(f"\nAt {R} GPUs, overlapped: {rate:,.0f} samples/s for the job, "
          f"{args.batch * 1e3 / step:.0f} per GPU; an epoch of {args.samples:,} pairs in "
          f"{args.samples / rate / 60:.1f} min, {args.epochs} epochs in "
          f"{args.epochs * args.samples / rate / 3600:.1f} h")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("metrics")
    c.add_argument("config")
    c.add_argument("ranks", type=int)
    c.add_argument("batch", type=int)
    c.add_argument("--tolerance", type=float, default=0.0)
    c.add_argument("--backend", choices=["mpi", "nccl"], default="mpi",
                   help="the run's comm.backend (nccl: the feature gather exchanges no counts)")
    t = sub.add_parser("table")
    t.add_argument("config")
    t.add_argument("--batch", type=int, nargs="+", default=[32, 64])
    t.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    t.add_argument("--compute-ms", type=float, nargs="+", default=[100.0])
    t.add_argument("--compute-batch", type=int, default=32)
    t.add_argument("--bus-gbs", type=float, nargs="+", default=[350.0, 45.0, 12.0])
    t.add_argument("--backward-share", type=float, default=2 / 3,
                   help="the backward's share of a step's compute (two matmuls per forward one)")
    t.add_argument("--bucket-mb", type=float, default=25.0,
                   help="comm.bucket_mb: the last bucket waits for the end of the backward")
    sc = sub.add_parser("scaling")
    sc.add_argument("config")
    sc.add_argument("--compute-ms", type=float, required=True,
                    help="one GPU's measured step at --batch (the method's work excluded)")
    sc.add_argument("--method-ms", type=float, default=0.0,
                    help="the method's own work per step on top of --compute-ms")
    sc.add_argument("--batch", type=int, required=True)
    sc.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    sc.add_argument("--gpus-per-node", type=int, default=8)
    sc.add_argument("--intra-gbs", type=float, default=450.0,
                    help="NCCL all-reduce bus bandwidth inside a node (NVLink)")
    sc.add_argument("--inter-gbs", type=float, default=180.0,
                    help="... across nodes: the node's network (4 x 400 Gb/s = 200 GB/s, ~90%%)")
    sc.add_argument("--backward-share", type=float, default=2 / 3)
    sc.add_argument("--bucket-mb", type=float, default=25.0)
    sc.add_argument("--samples", type=int, default=4_000_000)
    sc.add_argument("--epochs", type=int, default=30)
    args = ap.parse_args()
    return {"check": check, "table": table, "scaling": scaling}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
