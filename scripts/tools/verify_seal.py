#!/usr/bin/env python3
"""An independent check of a run's seal (records schemas 3 to 7), written from results/README.md
alone with h5py and hashlib: recomputes every dataset's chain (and every carried row digest),
compares the chain ends with `primary_digests` / `group_digests`, and recomputes the run
digest over the sealed attributes. Prints the run digest and `intact`, or each problem and
`altered`; exit status 0 when intact, 1 when altered, 2 on a usage error.

    python3 scripts/tools/verify_seal.py results/<run-id> [--digest HEX]
"""
import hashlib
import json
import struct
import sys
from pathlib import Path

import h5py
import numpy as np

# The sealed attributes of primary.h5, in the run digest's order (results/README.md); a third
# member is the first schema version that has the attribute.
PRIMARY_ATTRS = [
    ("schema_version", "u32"), ("program_version", "text"), ("rules_version", "text"),
    ("config", "text"), ("start_time_s", "f64"), ("end_time_s", "f64"),
    ("world_size", "u32"), ("groups", "u32"), ("accelerators", "u32"), ("hosts", "text"),
    ("devices", "text"), ("seed", "u64"), ("dataset", "text"), ("start_architecture", "text"),
    ("precision", "text"), ("dataset_identity", "text"), ("search", "text"),
    ("platform", "text", 4), ("ceilings", "text", 5), ("resumes", "text"), ("group_digests", "text"), ("primary_digests", "text"),
]
CARRIED = {"epochs", "trials", "tpe", "steps"}


def seed(file, dataset):
    return hashlib.sha256(b"aiperf-chain-3\0" + file.encode() + b"\0" + dataset.encode()).digest()


def row_bytes(row):
    """A compound row: each member but `digest`, little-endian, in member order."""
    out = b""
    for name in row.dtype.names:
        if name == "digest":
            continue
        ty = row.dtype[name]
        base = ty.base if ty.subdtype else ty
        out += np.asarray(row[name]).astype(base.newbyteorder("<")).tobytes()
    return out


def chain(file, dataset, rows, problems):
    """The chain's end over `rows`; rows carrying a digest must carry the running one."""
    d = seed(file, dataset)
    broken = None
    for i, r in enumerate(rows):
        d = hashlib.sha256(d + row_bytes(r)).digest()
        if dataset in CARRIED and broken is None and bytes(r["digest"]) != d:
            broken = i
    if broken is not None:
        problems.append(f"{file} {dataset} row {broken}: its digest does not follow")
    return {"dataset": dataset, "rows": len(rows), "digest": d.hex()}


def group_datasets(version):
    """The datasets of a group file, in group_digests' order (`steps` from schema 7)."""
    return ("epochs", "monitor", "trace") + (("steps",) if version >= 7 else ())


def architectures(p):
    d = seed("primary.h5", "architectures")
    ids, texts = p["architecture_ids"][:], p["architectures"][:]
    for i, t in zip(ids, texts):
        t = t.encode() if isinstance(t, str) else bytes(t)
        d = hashlib.sha256(d + struct.pack("<Q", int(i)) + struct.pack("<Q", len(t)) + t).digest()
    return {"dataset": "architectures", "rows": len(ids), "digest": d.hex()}


def text(v):
    return v.encode() if isinstance(v, str) else bytes(v)


def sealed_attrs(version):
    """The sealed attributes records of schema `version` have, in order."""
    return [a for a in PRIMARY_ATTRS if (a[2] if len(a) > 2 else 1) <= version]


def run_digest(p):
    h = hashlib.sha256(b"aiperf-run-digest-3\0")
    for name, kind, *_ in sealed_attrs(int(p.attrs["schema_version"])):
        h.update(struct.pack("<Q", len(name)) + name.encode())
        if name not in p.attrs:
            h.update(b"\0")
            continue
        v = p.attrs[name]
        if kind == "u32":
            h.update(b"\1" + struct.pack("<I", int(v)))
        elif kind == "u64":
            h.update(b"\2" + struct.pack("<Q", int(v)))
        elif kind == "f64":
            h.update(b"\3" + struct.pack("<d", float(v)))
        else:
            t = text(v)
            h.update(b"\4" + struct.pack("<Q", len(t)) + t)
    return h.hexdigest()


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--digest"):
        print(__doc__, file=sys.stderr)
        return 2
    run = Path(argv[1])
    problems = []
    with h5py.File(run / "primary.h5", "r") as p:
        version = int(p.attrs["schema_version"])
        if version not in (3, 4, 5, 6, 7):
            print(f"schema {version}: not sealed as schemas 3 to 7 are", file=sys.stderr)
            return 2
        known = {a[0] for a in sealed_attrs(version)} | {"run_digest"}
        problems += [f"primary.h5: attribute {n!r} is not sealed" for n in p.attrs if n not in known]
        own = [chain("primary.h5", "trials", p["trials"][:], problems), architectures(p),
               chain("primary.h5", "tpe", p["tpe"][:], problems)]
        if "run_digest" not in p.attrs:
            print("no run digest: the run did not stop cleanly")
            return 1
        if json.loads(text(p.attrs["primary_digests"])) != own:
            problems.append("primary.h5: its chains do not end as primary_digests records")
        recorded = {g["group"]: g for g in json.loads(text(p.attrs["group_digests"]))}
        for g in range(int(p.attrs["groups"])):
            name = f"group-{g}.h5"
            with h5py.File(run / name, "r") as f:
                ends = [chain(name, d, f[d][:], problems) for d in group_datasets(version)]
                want = {"group": g, "ranks": int(f.attrs["accelerators"]), "chains": ends}
                if recorded.get(g) != want:
                    problems.append(f"{name}: its chains or ranks are not what group_digests records")
        digest = run_digest(p)
        if text(p.attrs["run_digest"]).decode().lower() != digest:
            problems.append("primary.h5: the run digest does not match its attributes")
    if len(argv) == 4 and argv[3].lower() != digest:
        problems.append(f"the run digest {digest} is not the one given with --digest")
    print(f"run digest {digest}")
    for line in problems:
        print(f"  {line}")
    print("altered" if problems else "intact")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
