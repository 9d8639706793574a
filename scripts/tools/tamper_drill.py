#!/usr/bin/env python3
"""The forger's drill: what a dishonest submitter can do with results/README.md
alone. Copies the run in SRC to DST, relabels it as an official run — the official
configuration keys, ImageNet's dataset identity, the official search record, the start
moved back by --shift seconds (default 3600) — and reseals every chain and the run digest
exactly as the README documents, so that the records verify as intact. Prints the new run
digest. `aiperf score DST` must then refuse it by the consistency rules of aiperf-rules-6.

    python3 scripts/tools/tamper_drill.py SRC DST [--shift SECONDS]
"""
import hashlib
import json
import shutil
import sys
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify_seal import architectures, chain, group_datasets, run_digest  # noqa: E402

IMAGENET = {"name": "imagenet", "train_images": 1281167, "val_images": 50000, "classes": 1000,
            "stored": [3, 256, 256], "input": [224, 224, 3], "subset": False, "crc32": [1, 2]}
SEARCH = {"architecture_search": {"name": "network-morphism-bo", "version": 3},
          "hpo": {"name": "tpe", "version": 2}, "warmup_epochs": [15, 30, 45],
          "patience": [8, 10, 12, 14, 16, 18, 20, 20], "tpe_from_round": 4}
TEXT = h5py.string_dtype("utf-8")


def set_text(f, name, value):
    if name in f.attrs:
        del f.attrs[name]
    f.attrs.create(name, value, dtype=TEXT)


def reseal_carried(f, file, dataset):
    rows = f[dataset][:]
    d = hashlib.sha256(b"aiperf-chain-3\0" + file.encode() + b"\0" + dataset.encode()).digest()
    from verify_seal import row_bytes
    for r in rows:
        d = hashlib.sha256(d + row_bytes(r)).digest()
        r["digest"] = np.frombuffer(d, dtype=np.uint8)
    f[dataset][...] = rows
    return chain(file, dataset, rows, [])


def relabel(p, shift):
    config = json.loads(p.attrs["config"])
    preset = config["preset"]
    preset.update({"name": "imagenet", "dataset": "imagenet", "start": "resnet50", "epochs": 60,
                   "kernel_sizes": [3, 5, 7], "patience_scale": 1.0})
    preset["duration_s"] = preset["duration_s"] + shift
    preset["train"].update({"train_images": None, "val_images": None})
    set_text(p, "config", json.dumps(config, separators=(",", ":")))
    set_text(p, "dataset_identity", json.dumps(IMAGENET, separators=(",", ":")))
    set_text(p, "search", json.dumps(SEARCH, separators=(",", ":")))
    set_text(p, "dataset", "imagenet")
    set_text(p, "start_architecture", "resnet50")
    p.attrs.modify("start_time_s", np.float64(p.attrs["start_time_s"] - shift))


def reseal(run, p):
    """Reseals every chain of the run folder `run` (its primary.h5 open as `p`) and the run
    digest, as results/README.md documents them; returns the new run digest."""
    version = int(p.attrs["schema_version"])
    groups = []
    for g in range(int(p.attrs["groups"])):
        name = f"group-{g}.h5"
        with h5py.File(run / name, "r+") as f:
            ends = [reseal_carried(f, name, d) if d in ("epochs", "steps")
                    else chain(name, d, f[d][:], []) for d in group_datasets(version)]
            groups.append({"group": g, "ranks": int(f.attrs["accelerators"]), "chains": ends})
    own = [reseal_carried(p, "primary.h5", "trials"), architectures(p),
           reseal_carried(p, "primary.h5", "tpe")]
    set_text(p, "group_digests", json.dumps(groups, separators=(",", ":")))
    set_text(p, "primary_digests", json.dumps(own, separators=(",", ":")))
    digest = run_digest(p)
    set_text(p, "run_digest", digest)
    return digest


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] != "--shift"):
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = Path(argv[1]), Path(argv[2])
    shift = float(argv[4]) if len(argv) == 5 else 3600.0
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("audit.h5"))
    with h5py.File(dst / "primary.h5", "r+") as p:
        relabel(p, shift)
        digest = reseal(dst, p)
    print(f"run digest {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
