#!/usr/bin/env python3
"""A simulated run's primary against the primary bench at the run's own scale.

Usage: primary_run_vs_bench.py LOG BENCH_JSONL
       primary_run_vs_bench.py --scale LOG

With --scale, prints the history the run reached and its Progress requests per trial
(rounded, at least 1): the bench's HISTORY and EPOCHS for the comparison.

LOG is rank 0's log of `aiperf run --trainer simulated`: its last "primary: CPU per
request ..." line gives the serving thread's CPU microseconds handling a request of each
kind (after decoding it, up to its encoded and released reply: what the bench times), the
Result replies' mean bytes, the requests of each kind and the history the run reached. A
run's groups also register architectures another group registered first (duplicates); the
bench's do not, so duplicates are shown apart and left out of the per-trial comparison.
BENCH_JSONL holds the rows of `cargo bench --bench primary` run with the run's groups, its
history and its Progress requests per trial, repeated, with warm caches (CACHES=hot) and
with the caches emptied before each request (CACHES=cold). The rows of one repetition are
bands of history size (the first from 0); their figures are combined weighted by each
band's trials, so both sides cover the history from 0 to the run's.

A run's primary sleeps until a request comes while the node's other ranks run, so its
caches are neither as warm as the bench's loop nor always empty: the run agrees with the
bench when each figure lies within the bench's range, from the least of its warm
repetitions to the most of its cold ones (the bench's noise and the two cache states). The
Result replies' bytes agree when they are at most the bench's: its groups take turns, the
worst case for a reply.

Prints one table (kind, run, bench warm and cold ranges, ratios to their medians, verdict),
a line saying whether the run agrees, and, last, one JSON object with the same figures for
the measurement log. Exits 1 when a file lacks what it needs.
"""

import json
import re
import sys

KINDS = ["register", "suggest", "progress", "result"]


def run_figures(log_path):
    """The last cost line of the log, as a dict; None when there is none."""
    line = None
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for text in f:
            if "primary: CPU per request" in text:
                line = text
    if line is None:
        return None
    fig = {}
    for kind in KINDS + ["duplicate"]:
        m = re.search(rf"\b{kind} ([\d.]+) us", line)
        fig[f"{kind}_cpu_us"] = float(m[1])
    fig["decode_us"] = float(re.search(r"decoding ([\d.]+) us per request", line)[1])
    fig["reply_bytes"] = float(re.search(r"Result replies (\d+) bytes", line)[1])
    counts = line.split("; ")[-2]
    for kind in ["hello", "register", "duplicate", "suggest", "progress", "result", "bye"]:
        fig[f"{kind}_requests"] = int(re.search(rf"(\d+) {kind}\b", counts)[1])
    fig["history"] = int(re.search(r"history (\d+) models", line)[1])
    results = max(fig["result_requests"], 1)
    fig["trial_ms"] = sum(fig[f"{k}_requests"] * fig[f"{k}_cpu_us"] for k in KINDS) / results / 1e3
    return fig


def combined(rows):
    """One repetition's bands combined, weighted by trials; None without trials."""
    trials = sum(r["trials"] for r in rows)
    if trials == 0:
        return None
    fig = {"groups": rows[0]["groups"], "history": rows[-1]["history_to"]}
    for kind in KINDS:
        key = f"{kind}_cpu_us" if f"{kind}_cpu_us" in rows[0] else f"{kind}_us"
        fig[f"{kind}_cpu_us"] = sum(r[key] * r["trials"] for r in rows) / trials
    fig["trial_ms"] = 1e3 * sum(r["trial_cpu_s"] * r["trials"] for r in rows) / trials
    fig["reply_bytes"] = sum(r["result_reply_bytes"] * r["trials"] for r in rows) / trials
    return fig


def bench_figures(jsonl_path):
    """The bench's repetitions by cache state ("hot", "cold"), each combined over its
    bands; a row without "caches" is warm. None when there is no row with trials."""
    with open(jsonl_path, encoding="utf-8") as f:
        rows = [json.loads(l) for l in f if l.startswith("{")]
    reps = {"hot": [], "cold": []}
    current = None
    for r in (r for r in rows if r.get("what") == "primary"):
        caches = r.get("caches", "hot")
        if current is None or r["history_from"] == 0 or caches != current[0]:
            current = (caches, [])
            reps.setdefault(caches, []).append(current[1])
        current[1].append(r)
    out = {c: [f for f in map(combined, runs) if f] for c, runs in reps.items()}
    return out if out["hot"] or out["cold"] else None


def spread(figs, key):
    """Least, median and most of `key` over repetitions; None without any."""
    values = sorted(f[key] for f in figs)
    return (values[0], values[len(values) // 2], values[-1]) if values else None


def num(x):
    """A figure as the table shows it: whole from 100, one decimal from 10, two below."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def main(argv):
    if len(argv) != 3:
        print("\n".join(__doc__.strip().splitlines()[2:4]), file=sys.stderr)
        return 2
    scale = argv[1] == "--scale"
    log = argv[2] if scale else argv[1]
    run = run_figures(log)
    if run is None:
        print(f"{log}: no 'primary: CPU per request' line (a log of aiperf run's rank 0 is needed)",
              file=sys.stderr)
        return 1
    if scale:
        per_trial = run["progress_requests"] / max(run["result_requests"], 1)
        print(run["history"], max(1, round(per_trial)))
        return 0
    bench = bench_figures(argv[2])
    if bench is None:
        print(f"{argv[2]}: no primary bench rows with trials (run cargo bench --bench primary)",
              file=sys.stderr)
        return 1
    results = max(run["result_requests"], 1)
    # The run's own mix of requests, each at the bench's cost: a trial as the bench would
    # price the run's trials (warm-up rounds make the Progress requests per trial differ).
    for figs in bench.values():
        for f in figs:
            f["trial_ms"] = sum(run[f"{k}_requests"] * f[f"{k}_cpu_us"] for k in KINDS) / results / 1e3
    first = (bench["hot"] or bench["cold"])[0]
    for caches, name in [("hot", "warm"), ("cold", "cold")]:
        if not bench[caches]:
            print(f"{argv[2]}: no {name} repetition (CACHES={caches}): the range is the "
                  f"{'cold' if caches == 'hot' else 'warm'} repetitions' alone", file=sys.stderr)
    print(f"run: {run['history']} models; bench: {first['groups']} groups to {first['history']} "
          f"models, {len(bench['hot'])} warm and {len(bench['cold'])} cold repetitions")
    print(f"{'':>18} {'run':>9} {'bench warm':>17} {'bench cold':>17} {'/warm':>6} {'/cold':>6}  verdict")
    table, verdicts = {}, {}
    for key in [f"{k}_cpu_us" for k in KINDS] + ["trial_ms", "reply_bytes"]:
        hot, cold = spread(bench["hot"], key), spread(bench["cold"], key)
        low = (hot or cold)[0]
        high = max(x[2] for x in (hot, cold) if x)
        if key == "reply_bytes":
            ok, why = run[key] <= high, "at most the bench's" if run[key] <= high else "above the bench's"
        else:
            ok = low <= run[key] <= high
            why = "within" if ok else ("below the least" if run[key] < low else "above the most")
        verdicts[key] = ok
        cols = [f"{num(x[0]):>8}-{num(x[2]):<8}" if x else f"{'-':>17}" for x in (hot, cold)]
        ratio = [f"{run[key] / x[1]:>6.2f}" if x and x[1] > 0 else f"{'-':>6}" for x in (hot, cold)]
        print(f"{key:>18} {num(run[key]):>9} {cols[0]} {cols[1]} {ratio[0]} {ratio[1]}  {why}")
        table[key] = {"run": run[key], "warm": hot, "cold": cold}
    dup = run["duplicate_requests"] * run["duplicate_cpu_us"] / results / 1e3
    print(f"run only: {run['duplicate_requests']} duplicates at {run['duplicate_cpu_us']:.0f} us "
          f"({dup:.2f} ms per trial); decoding {run['decode_us']:.1f} us per request")
    off = [k for k, ok in verdicts.items() if not ok]
    print("the run agrees with the bench" if not off else f"the run DISAGREES with the bench: {', '.join(off)}")
    print(json.dumps({"what": "primary-run-vs-bench", "run": run, "figures": table,
                      "agrees": verdicts, "all_agree": not off}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
