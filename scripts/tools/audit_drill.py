#!/usr/bin/env python3
"""The forger's audit drills: what a submitter who did not do the work could try against
`aiperf audit`, with results/README.md alone. Copies the run in SRC to DST (without its
audit), alters it, reseals every chain and the run digest as the README documents (the
records verify as intact) and prints the new run digest. Each alteration must make the audit
FAIL, in whichever mode it runs:

    --raise D          every epoch's validation accuracy raised by D, its losses lowered by D
    --copy-trial       the last trial with epochs replaced by a copy of the first trial with
                       epochs (architecture, batch, figures, early steps) under its own id
    --claim-platform   every rank's platform fingerprint rewritten to another processor, so
                       that no auditor's matches and the audit is statistical

    python3 scripts/tools/audit_drill.py SRC DST [--raise D] [--copy-trial] [--claim-platform]
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tamper_drill import reseal, set_text  # noqa: E402


def raise_figures(groups, p, d):
    for f in groups.values():
        e = f["epochs"][:]
        e["val_accuracy"] = np.minimum(e["val_accuracy"] + d, 1.0)
        e["train_loss"] -= d
        e["val_loss"] -= d
        f["epochs"][...] = e
    t = p["trials"][:]
    t["best_accuracy"] = np.minimum(t["best_accuracy"] + d, 1.0)
    p["trials"][...] = t


def copy_trial(groups, p):
    """The last trial with epochs becomes a copy of the first one (same group or not)."""
    t = p["trials"][:]
    done = [i for i in range(len(t)) if t[i]["epochs"] > 0]
    if len(done) < 2:
        raise SystemExit("audit_drill: --copy-trial needs two trials with epochs")
    a, b = t[done[0]], t[done[-1]]
    ga, gb = groups[int(a["group"])], groups[int(b["group"])]
    ea = [r for r in ga["epochs"][:] if r["model_id"] == a["model_id"]]
    eb = gb["epochs"][:]
    mine = [i for i in range(len(eb)) if eb[i]["model_id"] == b["model_id"]]
    for i, src in zip(mine, ea):
        keep = {k: eb[i][k].item() for k in ("time_s", "trial", "model_id", "epoch")}
        eb[i] = src
        for k, v in keep.items():
            eb[i][k] = v
    gb["epochs"][...] = eb
    sa = [r for r in ga["steps"][:] if r["model_id"] == a["model_id"]]
    sb = gb["steps"][:]
    for i, src in zip([i for i in range(len(sb)) if sb[i]["model_id"] == b["model_id"]], sa):
        sb[i]["train_loss"] = src["train_loss"]
    gb["steps"][...] = sb
    ids = list(p["architecture_ids"][:])
    texts = p["architectures"]
    texts[ids.index(b["model_id"])] = texts[ids.index(a["model_id"])]
    for k in ("batch_size", "kernel_size", "best_accuracy"):
        t[done[-1]][k] = a[k]
    p["trials"][...] = t
    print(f"model {int(b['model_id'])} now holds a copy of model {int(a['model_id'])}")


def claim_platform(p):
    entries = json.loads(p.attrs["platform"])
    for e in entries:
        f = e["fingerprint"]
        f.update({"cpu_vendor": "GenuineIntel", "cpu_model": "Forged Xeon 9999",
                  "aten_capability": "AVX512", "onednn_isa": "avx512_core"})
    set_text(p, "platform", json.dumps(entries, separators=(",", ":")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--raise", dest="gain", type=float, default=0.0)
    ap.add_argument("--copy-trial", action="store_true")
    ap.add_argument("--claim-platform", action="store_true")
    a = ap.parse_args()
    shutil.copytree(a.src, a.dst, ignore=shutil.ignore_patterns("audit.h5", ".aiperf-claim*"))
    with h5py.File(a.dst / "primary.h5", "r+") as p:
        groups = {g: h5py.File(a.dst / f"group-{g}.h5", "r+") for g in range(int(p.attrs["groups"]))}
        try:
            if a.gain:
                raise_figures(groups, p, a.gain)
            if a.copy_trial:
                copy_trial(groups, p)
        finally:
            for f in groups.values():
                f.close()
        if a.claim_platform:
            claim_platform(p)
        digest = reseal(a.dst, p)
    print(f"run digest {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
