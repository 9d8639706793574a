"""The weak-scaling table of scripts/weak-scaling, from `aiperf-score --json` of its runs:
OPS per accelerator and efficiency against the smallest run (the score's: whole epochs,
so it moves in steps of an epoch), the step efficiency (operations per second of the
epochs' own time — compute, exposed exchange, data wait — per accelerator, against the
smallest run: not quantised by epochs, so it resolves well below 1 %), the machine's load
when the run started (1-minute load average; the same exchange moved 3x with other load
on this VM), the exchange per step (what the step waited for: with overlap, what backward
did not hide), the
alpha-beta bandwidth bound 2(n-1)/n * bytes / link bandwidth, and the exchange per ring hop
(per step / 2(n-1)): when that stays flat while the bound is far below the measurement, the
latency term (per-message cost) holds the exchange back, not the link's bandwidth.
Usage: weak_scaling_table.py SCORES.json LINK_GBIT|none RANKS_PER_NODE all|node
(a file RUN.load beside each run folder RUN holds its load average, if recorded)"""
import json
import os
import sys


def step_rate(s):
    """Operations per second per accelerator over the epochs' own time."""
    busy = s["compute_s"] + s["allreduce_s"] + s["data_wait_s"]
    return (s["train_ops"] + s["val_ops"]) / s["accelerators"] / busy if busy else 0.0


def load_of(s):
    path = s["run"].rstrip("/") + ".load"
    return open(path).read().split()[0] if os.path.exists(path) else "-"


scores, link, rpn, group = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3]), sys.argv[4]
scores.sort(key=lambda s: s["nodes"])
base = scores[0]["ops_per_s_per_accelerator"]
base_step = step_rate(scores[0])
bw = None if link == "none" else float(link) * 1e9 / 8
print("| nodes | accelerators | OPS per accelerator | efficiency | step efficiency | load | exchange per step | bytes per step | α–β bound per step | exchange / bound | per ring hop |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in scores:
    steps = max(s["steps"], 1)
    per_step = s["allreduce_s"] / steps
    nbytes = s["allreduce_bytes"] / steps
    ranks = s["accelerators"] if group == "all" else rpn
    bound, ratio = "-", "-"
    if bw and ranks > 1 and s["nodes"] > 1:
        b = 2 * (ranks - 1) / ranks * nbytes / bw
        bound, ratio = f"{b * 1e3:.2f} ms", f"{per_step / b:.2f}x"
    hop = f"{per_step / (2 * (ranks - 1)) * 1e3:.2f} ms" if ranks > 1 else "-"
    eff = s["ops_per_s_per_accelerator"] / base if base else 0
    step_eff = step_rate(s) / base_step if base_step else 0
    print(f"| {s['nodes']} | {s['accelerators']} | {s['ops_per_s_per_accelerator'] / 1e9:.3f} G | {eff:.3f} | {step_eff:.4f} | {load_of(s)} | {per_step * 1e3:.2f} ms | {nbytes / 1e6:.3f} MB | {bound} | {ratio} | {hop} |")
