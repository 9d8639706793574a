"""The weak-scaling table of scripts/tools/weak-scaling, over its repetitions.

Each repetition is a sweep over the sizes, scored by `aiperf-score --json` into
OUT/r<k>/scores.json (an older single sweep, OUT/scores.json, counts as one). Per size, over
the repetitions (median, and min-max as the spread):
- step efficiency: operations per second of the epochs' own time (compute, exposed
  exchange, data wait) per accelerator, against the same repetition's smallest run; not
  quantised by whole epochs, so it resolves well below 1 %;
- efficiency (score): OPS per accelerator against the smallest run (whole epochs only);
- exposed exchange per step: what the step waited for after backward (with overlap, what
  backward did not hide), and with emulated accelerators the time spent inside the
  gradient reports too (the real trainer books that as compute, inside backward);
- whole exchange per step and the hidden fraction, from the run's step trace
  (RUN.trace.json, `aiperf-score --trace`): each bucket's reduction from its start to its
  end, and the part of it that lay inside the forward+backward span;
- what the exposed exchange was, from the traces: waiting for the group's slowest rank to
  end backward (the wait for peers: stragglers, not the interconnect), and the time after
  that (the reduction of what was left once every rank was ready);
- the link's alpha-beta bound (docs/design.md §8) over N nodes: per bucket 2(N-1)·α +
  2(N-1)/N · bucket bytes / link bandwidth, summed over the step's buckets (the whole
  exchange's bound), and the last bucket's alone (the exposed exchange's: backward cannot
  hide the reduction of gradients ready only when it ends); the whole and the exposed
  exchange, and the time after the slowest rank, as multiples of their bounds. α is fitted
  (scripts/tools/scaling-model) to comm-bench run on the same nodes before the runs
  (--comm-bench-dir DIR holding nN.jsonl per size: its scope across the nodes with one rank
  each, or its world with one rank per node); without one, α = 0 (the bandwidth term
  alone);
- the raw in-place all-reduce of the last bucket's bytes over the run's ranks (the same
  record's world scope, interpolated between its sizes; comm-bench's node-aware exchange
  instead where the run took that one, RUN.exchange), and the time after the slowest rank
  as a multiple of it: what the exchange adds to the call it makes;
- the machine's 1-minute load average when each run started (RUN.load).
Writes the table (Markdown) to stdout and the medians to OUT/table.json (for
`scripts/tools/scaling-model check`).
Usage: weak_scaling_table.py OUT LINK_GBIT|none RANKS_PER_NODE all|node
         [--comm-bench-dir DIR] [--bucket-bytes 131072]"""
import argparse
import functools
import glob
import importlib.machinery
import importlib.util
import json
import math
import os
import statistics
import sys


def step_rate(s):
    """Operations per second per accelerator over the epochs' own time."""
    busy = s["compute_s"] + s["allreduce_s"] + s["data_wait_s"]
    return (s["train_ops"] + s["val_ops"]) / s["accelerators"] / busy if busy else 0.0


def load_of(s):
    """The load average recorded beside the run, or None."""
    path = s["run"].rstrip("/") + ".load"
    return float(open(path).read().split()[0]) if os.path.exists(path) else None


def overlap_of(run):
    """(whole exchange per traced step in s, hidden fraction, wait for the slowest rank in s,
    time after it in s) from RUN.trace.json, or None.

    A step is one (group, rank, model, epoch, step); its exchange is the union of its
    buckets' spans, hidden the part of it before the forward+backward span's end. The
    group's ranks' spans of one step are on one clock (rank 0's): the last of them to end
    backward sets when every rank was ready."""
    path = run.rstrip("/") + ".trace.json"
    if not os.path.exists(path):
        return None
    steps = {}
    for e in json.load(open(path)).get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        a = e["args"]
        key = (e["pid"], e["tid"], a["model"], a["epoch"], a["step"])
        step = steps.setdefault(key, {"compute_end": None, "spans": []})
        start, end = e["ts"], e["ts"] + e["dur"]
        if e["cat"] == "forward+backward":
            step["compute_end"] = end
        elif e["cat"] == "exchange":
            step["spans"].append((start, end))
    steps = {k: s for k, s in steps.items() if s["compute_end"] is not None and s["spans"]}
    ready = {}
    for (group, _, model, epoch, n), step in steps.items():
        at = (group, model, epoch, n)
        ready[at] = max(ready.get(at, step["compute_end"]), step["compute_end"])
    whole = hidden = wait = after = 0.0
    for (group, _, model, epoch, n), step in steps.items():
        last = None
        for start, end in sorted(step["spans"]):
            if last is not None:
                start = max(start, last)
            if end <= start:
                continue
            whole += end - start
            hidden += max(0.0, min(end, step["compute_end"]) - start)
            last = end
        all_ready = ready[(group, model, epoch, n)]
        done = max(end for _, end in step["spans"])
        wait += max(0.0, min(all_ready, done) - step["compute_end"])
        after += max(0.0, done - all_ready)
    if not steps or whole <= 0:
        return None
    k = len(steps) * 1e6
    return whole / k, hidden / whole, wait / k, after / k


@functools.lru_cache(maxsize=None)
def scaling_model():
    """scripts/tools/scaling-model as a module (its fit and bucket layout)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scaling-model")
    loader = importlib.machinery.SourceFileLoader("scaling_model", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def link_figures(directory, nodes):
    """(α in s per hop, {method: [(bytes, seconds)]} over the world: the in-place all-reduce
    (`allreduce`) and comm-bench's node-aware exchange (`hierarchical`)) from
    DIR/n<nodes>.jsonl; (0, {}) without a directory or for one node."""
    if not directory or nodes < 2:
        return 0.0, {}
    path = os.path.join(directory, f"n{nodes}.jsonl")
    if not os.path.exists(path):
        sys.exit(f"weak_scaling_table.py: --comm-bench-dir {directory}: no n{nodes}.jsonl for the "
                 f"{nodes}-node point (scripts/tools/weak-scaling writes one per size)")
    model = scaling_model()
    by = model.load(path, "allreduce-in-place")
    across = [rows for scope, rows in by.items() if scope.startswith("across")]
    links = across[0] if across else by.get("world")
    if not links or links[0][0] != nodes:
        sys.exit(f"weak_scaling_table.py: {path}: needs a scope of {nodes} ranks, one per node")
    node_aware = model.load(path, "hierarchical", required=False)
    world = {"allreduce": sorted((m, t) for _, m, t in by.get("world", [])),
             "hierarchical": sorted((m, t) for _, m, t in node_aware.get("world", []))}
    return model.fit(links)[0], world


def exchange_of(run):
    """The exchange the run made (RUN.exchange), or None."""
    path = run.rstrip("/") + ".exchange"
    return open(path).read().strip() if os.path.exists(path) else None


def raw_time(world, nbytes):
    """The record's time for nbytes, interpolated (log-log) between its neighbouring sizes;
    None outside them."""
    for (m0, t0), (m1, t1) in zip(world, world[1:]):
        if m0 <= nbytes <= m1:
            f = math.log(nbytes / m0) / math.log(m1 / m0) if m1 > m0 else 0.0
            return t0 * (t1 / t0) ** f
    return None


def buckets_of(nbytes, bucket_bytes):
    """The step's buckets, approximately: aiperf's first holds at most 1 MiB (as DDP's), the
    rest `bucket_bytes` each, the last what is left. aiperf closes a bucket at a whole
    tensor once it holds the cap, so its real buckets are somewhat larger and its last one
    differs; and the bytes per step are averaged over a run's architectures."""
    model = scaling_model()
    return model.bucket_sizes(nbytes, model.first_bucket(bucket_bytes), bucket_bytes)


def bounds(nodes, buckets, bw, alpha):
    """(whole, last bucket) alpha-beta bounds of one step's exchange over `nodes` nodes: the
    ring's 2(N-1)·α + 2(N-1)/N · bytes / bw per bucket."""
    one = lambda b: scaling_model().ring(alpha, 1 / bw, b, nodes)
    return sum(one(b) for b in buckets), one(buckets[-1])


def med_range(values, fmt):
    """'median (min-max)' of the values, formatted; '-' when there are none."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    m, lo, hi = fmt(statistics.median(values)), fmt(min(values)), fmt(max(values))
    return m if lo == hi else f"{m} ({lo}–{hi})"


def sweeps(out):
    """Every repetition's scores, each sorted by size."""
    files = sorted(glob.glob(os.path.join(out, "r*", "scores.json")))
    if not files and os.path.exists(os.path.join(out, "scores.json")):
        files = [os.path.join(out, "scores.json")]
    if not files:
        sys.exit(f"weak_scaling_table.py: no r*/scores.json under {out}: run scripts/tools/weak-scaling first")
    reps = [sorted(json.load(open(f)), key=lambda s: s["nodes"]) for f in files]
    empty = [f for f, rep in zip(files, reps) if not rep]
    if empty:
        sys.exit(f"weak_scaling_table.py: {empty[0]} scores no run: score the repetition's runs again")
    return reps


def points(reps, bw, group, comm_bench_dir, bucket_bytes):
    """Per size, every repetition's figures."""
    by_size = {}
    figures = {}
    for rep in reps:
        base, base_step = rep[0]["ops_per_s_per_accelerator"], step_rate(rep[0])
        for s in rep:
            steps = max(s["steps"], 1)
            nbytes = s["allreduce_bytes"] / steps
            bound = last_bound = raw = alpha = None
            if group == "all" and s["nodes"] > 1 and nbytes > 0:
                if s["nodes"] not in figures:
                    figures[s["nodes"]] = link_figures(comm_bench_dir, s["nodes"])
                alpha, world = figures[s["nodes"]]
                buckets = buckets_of(nbytes, bucket_bytes)
                # The call the run's last bucket made: the flat exchange's in-place
                # all-reduce, or the node-aware exchange where `auto` took it (RUN.exchange,
                # written by scripts/tools/weak-scaling); none when the run's exchange is unknown.
                raw = raw_time(world.get(exchange_of(s["run"]), []), buckets[-1])
                if bw:
                    # What any all-reduce over N nodes must pay on their links: 2(N-1)/N of
                    # the bytes through each node's link (a flat ring over every rank moves a
                    # little more) and 2(N-1) hops of α per bucket.
                    bound, last_bound = bounds(s["nodes"], buckets, bw, alpha)
            whole, hidden, wait, after = overlap_of(s["run"]) or (None,) * 4
            p = by_size.setdefault(s["nodes"], {"accelerators": s["accelerators"], "reps": []})
            p["reps"].append({
                "step_efficiency": step_rate(s) / base_step if base_step else 0.0,
                "efficiency": s["ops_per_s_per_accelerator"] / base if base else 0.0,
                "exposed_s": s["allreduce_s"] / steps,
                "wait_s": wait,
                "after_s": after,
                "whole_s": whole,
                "hidden": hidden,
                "bytes": nbytes,
                "bound_s": bound,
                "last_bound_s": last_bound,
                "alpha_s": alpha,
                "last_raw_s": raw,
                "load": load_of(s),
                "step_s": (s["compute_s"] + s["allreduce_s"] + s["data_wait_s"]) / steps,
            })
    return by_size


def median_of(p, key):
    values = [r[key] for r in p["reps"] if r[key] is not None]
    return statistics.median(values) if values else None


def main():
    ap = argparse.ArgumentParser(description="The weak-scaling table of scripts/tools/weak-scaling.")
    ap.add_argument("out")
    ap.add_argument("link", help="the links' rate, Gbit/s, or none")
    ap.add_argument("rpn", type=int, help="ranks per node")
    ap.add_argument("group", choices=["all", "node"])
    ap.add_argument("--comm-bench-dir", help="nN.jsonl: comm-bench --json on each size's nodes (α, the raw call)")
    ap.add_argument("--bucket-bytes", type=scaling_model().positive_int, default=131072,
                    help="the runs' --bucket-bytes")
    args = ap.parse_args()
    out, link, rpn, group = args.out, args.link, args.rpn, args.group
    bw = None if link == "none" else float(link) * 1e9 / 8
    by_size = points(sweeps(out), bw, group, args.comm_bench_dir, args.bucket_bytes)
    ms = lambda v: f"{v * 1e3:.2f}"
    print(f"α per hop fitted to {args.comm_bench_dir}/nN.jsonl" if args.comm_bench_dir
          else "no --comm-bench-dir: α = 0 (the bandwidth term alone), no raw call", end="")
    print(f"; buckets of about {args.bucket_bytes} bytes (the last one's size approximate)")
    print()
    print("| nodes | accelerators | step efficiency | efficiency (score) | exposed exchange per step, ms | of it waiting for the slowest rank | after it | whole exchange per step, ms | hidden | α per hop, µs | α–β bound, ms | whole / bound | last bucket's bound, ms | exposed / it | after the slowest / it | raw call of the last bucket, ms | after the slowest / it | load | repetitions |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary = []
    for n, p in sorted(by_size.items()):
        reps = p["reps"]
        bound, last = median_of(p, "bound_s"), median_of(p, "last_bound_s")
        alpha, raw = median_of(p, "alpha_s"), median_of(p, "last_raw_s")
        rel = lambda key, of: med_range([r[key] / r[of] if r[key] is not None and r[of] else None for r in reps], lambda v: f"{v:.2f}x")
        col = lambda key, fmt=ms: med_range([r[key] for r in reps], fmt)
        print(f"| {n} | {p['accelerators']} | {col('step_efficiency', lambda v: f'{v:.4f}')} "
              f"| {col('efficiency', lambda v: f'{v:.3f}')} | {col('exposed_s')} | {col('wait_s')} | {col('after_s')} "
              f"| {col('whole_s')} | {col('hidden', lambda v: f'{v:.0%}')} "
              f"| {f'{alpha * 1e6:.1f}' if alpha is not None else '-'} | {ms(bound) if bound else '-'} "
              f"| {rel('whole_s', 'bound_s')} | {ms(last) if last else '-'} | {rel('exposed_s', 'last_bound_s')} "
              f"| {rel('after_s', 'last_bound_s')} | {ms(raw) if raw else '-'} | {rel('after_s', 'last_raw_s')} "
              f"| {col('load', lambda v: f'{v:.2f}')} | {len(reps)} |")
        summary.append({"nodes": n, "accelerators": p["accelerators"], "repetitions": len(reps),
                        **{k: median_of(p, k) for k in reps[0]},
                        "step_efficiency_min": min(r["step_efficiency"] for r in reps),
                        "step_efficiency_max": max(r["step_efficiency"] for r in reps)})
    with open(os.path.join(out, "table.json"), "w") as f:
        json.dump({"link_gbit": None if link == "none" else float(link), "ranks_per_node": rpn,
                   "group": group, "bucket_bytes": args.bucket_bytes,
                   "points": summary}, f, indent=1)


main()
