"""The weak-scaling table of scripts/weak-scaling, from `aiperf-score --json` of its runs:
OPS per accelerator and efficiency against the smallest run, the exchange per step, the
alpha-beta bandwidth bound 2(n-1)/n * bytes / link bandwidth, and the exchange per ring hop
(per step / 2(n-1)): when that stays flat while the bound is far below the measurement, the
latency term (per-message cost) holds the exchange back, not the link's bandwidth.
Usage: weak_scaling_table.py SCORES.json LINK_GBIT|none RANKS_PER_NODE all|node"""
import json
import sys

scores, link, rpn, group = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3]), sys.argv[4]
scores.sort(key=lambda s: s["nodes"])
base = scores[0]["ops_per_s_per_accelerator"]
bw = None if link == "none" else float(link) * 1e9 / 8
print("| nodes | accelerators | OPS per accelerator | efficiency | exchange per step | bytes per step | α–β bound per step | exchange / bound | per ring hop |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
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
    print(f"| {s['nodes']} | {s['accelerators']} | {s['ops_per_s_per_accelerator'] / 1e9:.3f} G | {eff:.3f} | {per_step * 1e3:.2f} ms | {nbytes / 1e6:.3f} MB | {bound} | {ratio} | {hop} |")
