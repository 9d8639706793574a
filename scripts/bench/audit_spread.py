#!/usr/bin/env python3
"""Tabulates audits for scripts/bench/bench-audit-spread: per audited folder, value and epoch, the
recorded figure, its re-training with the same seed on the auditing platform, the spread over
the other seeds, and the ratio |recorded − same seed| / spread — how far another platform moves
a trial compared with another seed. Then the audit's own verdict, spreads by epoch, combined
tests, power and early steps.

    python3 scripts/bench/audit_spread.py AUDITED_DIR...
"""
import statistics
import sys
from pathlib import Path

import h5py

KINDS = ["train_loss", "val_loss", "val_accuracy"]


def main(dirs):
    for d in map(Path, dirs):
        with h5py.File(d / "audit.h5", "r") as f:
            rows, seeds = f["epochs"][:], f["seeds"][:]
            mode = f.attrs["mode"]
            mode = mode.decode() if isinstance(mode, bytes) else mode
            print(f"\n{d.name}: {mode} mode, verdict {f.attrs['verdict']}")
        print(f"  {'model':>5} {'epoch':>5} {'value':<13}{'recorded':>10}{'same seed':>11}"
              f"{'other seeds sd':>16}{'|gap|/sd':>10}")
        ratios = {k: [] for k in KINDS}
        for r in rows:
            mine = [s for s in seeds if (s["model_id"], s["epoch"]) == (r["model_id"], r["epoch"])]
            for k in KINDS:
                rec, same = float(r[k][0]), float(r[k][1])
                others = [float(s[k]) for s in mine] + [same]
                sd = statistics.stdev(others) if len(others) > 1 else float("nan")
                ratio = abs(rec - same) / sd if sd > 0 else float("inf")
                ratios[k].append(ratio)
                print(f"  {r['model_id']:>5} {r['epoch']:>5} {k:<13}{rec:>10.5f}{same:>11.5f}"
                      f"{sd:>16.5f}{ratio:>10.2f}")
        for k in KINDS:
            print(f"  {k}: median |gap|/sd {statistics.median(ratios[k]):.2f},"
                  f" max {max(ratios[k]):.2f}")
        text = (d.parent / f"{d.name}.txt").read_text()
        for line in text.splitlines():
            if line.strip().startswith(("statistic", "power", "mode", "verdict", "early steps")) or "combined:" in line:
                print("  audit:" + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
