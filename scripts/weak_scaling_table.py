"""The weak-scaling table of scripts/weak-scaling, over its repetitions.

Each repetition is a sweep over the sizes, scored by `aiperf-score --json` into
OUT/r<k>/scores.json (an older single sweep, OUT/scores.json, counts as one). Per size, over
the repetitions (median, and min-max as the spread):
- step efficiency: operations per second of the epochs' own time (compute, exposed
  exchange, data wait) per accelerator, against the same repetition's smallest run; not
  quantised by whole epochs, so it resolves well below 1 %;
- efficiency (score): OPS per accelerator against the smallest run (whole epochs only);
- exposed exchange per step: what the step waited for after backward (with overlap, what
  backward did not hide);
- whole exchange per step and the hidden fraction, from the run's step trace
  (RUN.trace.json, `aiperf-score --trace`): each bucket's reduction from its start to its
  end, and the part of it that lay inside the forward+backward span;
- the bandwidth bound 2(N-1)/N * bytes / link bandwidth over N nodes (what any all-reduce
  moves through each node's link), and the exposed and whole exchange as multiples of it;
- the machine's 1-minute load average when each run started (RUN.load).
Writes the table (Markdown) to stdout and the medians to OUT/table.json (for
`scripts/scaling-model check`).
Usage: weak_scaling_table.py OUT LINK_GBIT|none RANKS_PER_NODE all|node"""
import glob
import json
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
    """(whole exchange per traced step in s, hidden fraction) from RUN.trace.json, or None.

    A step is one (group, rank, model, epoch, step); its exchange is the union of its
    buckets' spans, hidden the part of it before the forward+backward span's end."""
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
    whole = hidden = 0.0
    counted = 0
    for step in steps.values():
        if step["compute_end"] is None or not step["spans"]:
            continue
        counted += 1
        last = None
        for start, end in sorted(step["spans"]):
            if last is not None:
                start = max(start, last)
            if end <= start:
                continue
            whole += end - start
            hidden += max(0.0, min(end, step["compute_end"]) - start)
            last = end
    if not counted or whole <= 0:
        return None
    return whole / counted / 1e6, hidden / whole


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
        sys.exit(f"weak_scaling_table.py: no r*/scores.json under {out}: run scripts/weak-scaling first")
    reps = [sorted(json.load(open(f)), key=lambda s: s["nodes"]) for f in files]
    empty = [f for f, rep in zip(files, reps) if not rep]
    if empty:
        sys.exit(f"weak_scaling_table.py: {empty[0]} scores no run: score the repetition's runs again")
    return reps


def points(reps, bw, rpn, group):
    """Per size, every repetition's figures."""
    by_size = {}
    for rep in reps:
        base, base_step = rep[0]["ops_per_s_per_accelerator"], step_rate(rep[0])
        for s in rep:
            steps = max(s["steps"], 1)
            nbytes = s["allreduce_bytes"] / steps
            bound = None
            if bw and group == "all" and s["nodes"] > 1:
                # What any all-reduce must move through each node's link: 2(N-1)/N of the
                # bytes over N nodes (a flat ring over every rank moves a little more).
                nodes = s["nodes"]
                bound = 2 * (nodes - 1) / nodes * nbytes / bw
            whole, hidden = overlap_of(s["run"]) or (None, None)
            p = by_size.setdefault(s["nodes"], {"accelerators": s["accelerators"], "reps": []})
            p["reps"].append({
                "step_efficiency": step_rate(s) / base_step if base_step else 0.0,
                "efficiency": s["ops_per_s_per_accelerator"] / base if base else 0.0,
                "exposed_s": s["allreduce_s"] / steps,
                "whole_s": whole,
                "hidden": hidden,
                "bytes": nbytes,
                "bound_s": bound,
                "load": load_of(s),
                "step_s": (s["compute_s"] + s["allreduce_s"] + s["data_wait_s"]) / steps,
            })
    return by_size


def median_of(p, key):
    values = [r[key] for r in p["reps"] if r[key] is not None]
    return statistics.median(values) if values else None


def main():
    out, link, rpn, group = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    bw = None if link == "none" else float(link) * 1e9 / 8
    by_size = points(sweeps(out), bw, rpn, group)
    ms = lambda v: f"{v * 1e3:.2f}"
    print("| nodes | accelerators | step efficiency | efficiency (score) | exposed exchange per step, ms | whole exchange per step, ms | hidden | α–β bound, ms | exposed / bound | whole / bound | load | repetitions |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary = []
    for n, p in sorted(by_size.items()):
        reps = p["reps"]
        bound = median_of(p, "bound_s")
        rel = lambda key: med_range([r[key] / r["bound_s"] if r[key] is not None and r["bound_s"] else None for r in reps], lambda v: f"{v:.2f}x")
        print(f"| {n} | {p['accelerators']} | {med_range([r['step_efficiency'] for r in reps], lambda v: f'{v:.4f}')} "
              f"| {med_range([r['efficiency'] for r in reps], lambda v: f'{v:.3f}')} "
              f"| {med_range([r['exposed_s'] for r in reps], ms)} | {med_range([r['whole_s'] for r in reps], ms)} "
              f"| {med_range([r['hidden'] for r in reps], lambda v: f'{v:.0%}')} | {ms(bound) if bound else '-'} "
              f"| {rel('exposed_s')} | {rel('whole_s')} | {med_range([r['load'] for r in reps], lambda v: f'{v:.2f}')} | {len(reps)} |")
        summary.append({"nodes": n, "accelerators": p["accelerators"], "repetitions": len(reps),
                        **{k: median_of(p, k) for k in reps[0]},
                        "step_efficiency_min": min(r["step_efficiency"] for r in reps),
                        "step_efficiency_max": max(r["step_efficiency"] for r in reps)})
    with open(os.path.join(out, "table.json"), "w") as f:
        json.dump({"link_gbit": None if link == "none" else float(link), "ranks_per_node": rpn,
                   "group": group, "points": summary}, f, indent=1)


main()
