#!/usr/bin/env python3
"""A simulated run's primary against the primary bench at the run's own scale.

Usage: primary_run_vs_bench.py LOG BENCH_JSONL
       primary_run_vs_bench.py --scale LOG

With --scale, prints the history the run reached and its Progress requests per trial
(rounded, at least 1): the bench's HISTORY and EPOCHS for the comparison.

LOG is rank 0's log of `aiperf run --trainer simulated`: its last "primary: CPU per
request ..." line gives the serving thread's CPU microseconds handling a request of each
kind (after decoding it, up to its encoded reply: what the bench times), the Result
replies' mean bytes, the requests of each kind and the history the run reached. A run's
groups also register architectures another group registered first (duplicates); the
bench's do not, so duplicates are shown apart and left out of the per-trial comparison.
BENCH_JSONL holds the rows of `cargo bench --bench primary` run with the run's groups, its
history and its Progress requests per trial. The bench's rows are bands of history size;
their figures are combined weighted by each band's trials, so both sides cover the history
from 0 to the run's.

Prints one table (kind, run, bench, run/bench) and, last, one JSON object with the same
figures for the measurement log. Exits 1 when a file lacks what it needs.
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


def bench_figures(jsonl_path):
    """The bench's rows combined over their bands, weighted by trials; None when empty."""
    rows = []
    with open(jsonl_path, encoding="utf-8") as f:
        rows = [json.loads(l) for l in f if l.startswith("{")]
    rows = [r for r in rows if r.get("what") == "primary"]
    trials = sum(r["trials"] for r in rows)
    if not rows or trials == 0:
        return None
    fig = {"groups": rows[0]["groups"], "history": rows[-1]["history_to"]}
    for kind in KINDS:
        key = f"{kind}_cpu_us" if f"{kind}_cpu_us" in rows[0] else f"{kind}_us"
        fig[f"{kind}_cpu_us"] = sum(r[key] * r["trials"] for r in rows) / trials
    fig["trial_ms"] = 1e3 * sum(r["trial_cpu_s"] * r["trials"] for r in rows) / trials
    fig["reply_bytes"] = sum(r["result_reply_bytes"] * r["trials"] for r in rows) / trials
    return fig


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
    keys = [f"{k}_cpu_us" for k in KINDS] + ["reply_bytes"]
    print(f"run: {run['history']} models; bench: {bench['groups']} groups to {bench['history']} models")
    print(f"{'':>18} {'run':>10} {'bench':>10} {'run/bench':>10}")
    ratios = {}
    for key in keys:
        ratios[key] = run[key] / bench[key] if bench[key] > 0 else float("nan")
        print(f"{key:>18} {run[key]:>10.0f} {bench[key]:>10.0f} {ratios[key]:>10.2f}")
    # The run's own mix of requests, each at the bench's cost: a trial as the bench would
    # price the run's trials (warm-up rounds make the Progress requests per trial differ).
    results = max(run["result_requests"], 1)
    priced = sum(run[f"{k}_requests"] * bench[f"{k}_cpu_us"] for k in KINDS) / results / 1e3
    ratios["trial_ms"] = run["trial_ms"] / priced if priced > 0 else float("nan")
    print(f"{'per trial (ms)':>18} {run['trial_ms']:>10.2f} {priced:>10.2f} {ratios['trial_ms']:>10.2f}")
    dup = run["duplicate_requests"] * run["duplicate_cpu_us"] / results / 1e3
    print(f"run only: {run['duplicate_requests']} duplicates at {run['duplicate_cpu_us']:.0f} us "
          f"({dup:.2f} ms per trial); decoding {run['decode_us']:.1f} us per request")
    print(json.dumps({"what": "primary-run-vs-bench", "run": run, "bench": bench,
                      "bench_trial_ms_at_run_mix": priced, "ratios": ratios}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
