#!/usr/bin/env python3
"""bench-comm's tables: the exchange against the best raw call, from comm-bench records.

  bench_comm_ratios.py sizes FILE...   per size, over the rounds FILE... of one configuration
  bench_comm_ratios.py summary DIR     per configuration of DIR/vc-NAME.rROUND.jsonl, over sizes

Two estimates of each ratio, side by side:
- of medians: each method's bus bandwidth, the median over the rounds of its record's
  median, divided by the best raw call's (the faster of the out-of-place and the in-place
  MPI_Allreduce by the same medians);
- paired: each operation against the best raw call's operation of the same iteration (the
  methods take turns within every iteration), the median over every iteration of every
  round that timed both. A drift of the machine between iterations or rounds moves the
  first, not the second. Records from before comm-bench kept its operations' times have
  no paired figure.
`control` is the in-place call timed again in its own turn, set against the in-place call:
what either estimate reads for one call against itself, the bench's resolution.
"""
import glob
import json
import os
import statistics
import sys

SHOWN = ("exchange", "hierarchical", "exchange-copy")
RAW = ("allreduce", "allreduce-in-place")


def by_size(files, scope="world"):
    """{bytes: {method: {round: row}}} of the records' rows in `scope` (a round is a file)."""
    out = {}
    for i, f in enumerate(files):
        with open(f) as fh:
            for r in map(json.loads, fh):
                if r["scope"] == scope:
                    out.setdefault(r["bytes"], {}).setdefault(r["method"], {})[i] = r
    return out


def paired(ref_rows, rows):
    """The median, over every iteration of every round that timed both methods operation by
    operation, of the reference's time over this one's in the same iteration; None if no
    round did (records from before comm-bench kept its operations' times)."""
    ratios = []
    for i in sorted(ref_rows.keys() & rows.keys()):
        ref, row = ref_rows[i], rows[i]
        if "times" in ref and "times" in row:
            ratios.extend(a / max(b, 1e-12) for a, b in zip(ref["times"], row["times"]))
    return statistics.median(ratios) if ratios else None


def ratios(methods):
    """One size's figures: the best raw call and each method's two ratios to it."""
    med = {k: statistics.median(r["busbw"] for r in v.values()) for k, v in methods.items()}
    best = max(RAW, key=lambda k: med[k])
    out = {"best": best, "best_busbw": med[best], "of_medians": {}, "paired": {}}
    for k in SHOWN:
        if k in methods:  # records from before a method existed lack it
            out["of_medians"][k] = med[k] / med[best]
            out["paired"][k] = paired(methods[best], methods[k])
    if "control" in methods:
        out["of_medians"]["control"] = med["control"] / med["allreduce-in-place"]
        out["paired"]["control"] = paired(methods["allreduce-in-place"], methods["control"])
    return out


def fmt(x):
    return "-" if x is None else f"{x:.2f}x"


def sizes_command(files):
    table = {b: ratios(m) for b, m in sorted(by_size(files).items())}
    print(f"{len(files)} round(s); ratios to the best raw call: of medians | paired")
    print(f"{'bytes':>10} {'best raw GB/s':>14} {'which raw':>9} {'exchange':>17} {'hier.':>15} "
          f"{'copy':>15} {'control':>15}")
    for b, r in table.items():
        which = "in place" if r["best"] == "allreduce-in-place" else "out"
        cells = [f"{fmt(r['of_medians'].get(k))} | {fmt(r['paired'].get(k))}"
                 for k in SHOWN + ("control",)]
        print(f"{b:>10} {r['best_busbw'] / 1e9:>14.3f} {which:>9} " + " ".join(f"{c:>15}" for c in cells))
    for est in ("of_medians", "paired"):
        v = [r[est]["exchange"] for r in table.values() if r[est].get("exchange") is not None]
        c = [r[est]["control"] for r in table.values() if r[est].get("control") is not None]
        if v:
            # Three decimals here: the count is of the unrounded ratios.
            print(f"exchange / best raw, {est.replace('_', ' ')}: {min(v):.3f}-{max(v):.3f}x, "
                  f">= 0.9x at {sum(x >= 0.9 for x in v)} of {len(v)} sizes"
                  + (f"; control / in place {min(c):.3f}-{max(c):.3f}x" if c else ""))


def summary_command(out):
    print("per configuration, over sizes: median (lowest-highest) of the per-size ratios, "
          "of medians | paired; sizes at >= 0.9x")
    print(f"{'configuration':<16} {'rounds':>6} {'exchange, of medians':>22} {'paired':>20} "
          f"{'>=0.9':>6} {'hierarchical, paired':>22} {'control, of medians':>21} {'paired':>20}")
    for first in sorted(glob.glob(os.path.join(out, "vc-*.r1.jsonl"))):
        name = os.path.basename(first)[:-len(".r1.jsonl")]
        files = sorted(glob.glob(os.path.join(out, f"{name}.r*.jsonl")))
        table = [ratios(m) for _, m in sorted(by_size(files).items())]

        def col(est, k):
            return [r[est][k] for r in table if r[est].get(k) is not None]

        def span(v):
            return f"{statistics.median(v):.2f}x ({min(v):.3f}-{max(v):.3f})" if v else "-"

        ex = col("paired", "exchange")
        at = f"{sum(x >= 0.9 for x in ex)}/{len(ex)}" if ex else "-"
        print(f"{name[3:]:<16} {len(files):>6} {span(col('of_medians', 'exchange')):>22} "
              f"{span(ex):>20} {at:>6} {span(col('paired', 'hierarchical')):>22} "
              f"{span(col('of_medians', 'control')):>21} {span(col('paired', 'control')):>20}")


def main(argv):
    if len(argv) >= 2 and argv[0] == "sizes":
        sizes_command(argv[1:])
    elif len(argv) == 2 and argv[0] == "summary":
        summary_command(argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
