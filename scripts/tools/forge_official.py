#!/usr/bin/env python3
"""The forger's drill, from scratch: what a dishonest submitter can write with the
documentation alone (results/README.md for the record schema and its seal, docs/design.md §4
for how operations are counted, docs/reviewer.md for the rules), without running anything.
Writes into OUT_DIR a complete record set — primary.h5, group-0.h5, group-1.h5 — that claims
an official run: ImageNet, a ResNet-50 start grown by the deeper morphism, 2 groups of 4 H100
ranks, bf16, one hour and a bit; every epoch's images and steps follow from the batch size,
every operation count is recomputed from the architectures exactly as the scorer does, the
times leave room for the work they record, and every chain, carried row digest and the run
digest are computed exactly as the README documents (records schema 7, with its `platform`
and `ceilings` attributes — the ceilings a plausible H100's — and invented early steps).
Prints the run digest.

No rule of the scorer can refuse such records: they describe work that fits together. Only
the audit (re-training a sample of the recorded trials) or a run digest from the job's own
log tells them apart from a real run.

    python3 scripts/tools/forge_official.py OUT_DIR
"""
import hashlib
import json
import math
import random
import sys
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tamper_drill import IMAGENET, SEARCH  # noqa: E402
from verify_seal import architectures, chain, row_bytes, run_digest, seed  # noqa: E402

TEXT = h5py.string_dtype("utf-8")
SCHEMA = 7
GROUPS, RANKS = 2, 4                     # 2 groups × 4 ranks, one node each, + the primary
T0 = 1796400000.318274                   # the claimed start (Unix seconds)
DURATION = 3700.0
BATCH, KERNEL = 144, 3                   # the preset's default hyperparameters (warm-up rounds)
EPOCHS, WARMUP = 60, [15, 30, 45]        # the epoch budget and the warm-up rounds' budgets
DATASET = dict(IMAGENET, crc32=[2860411825, 1129648722])
CLASSES, INPUT = DATASET["classes"], (3, 224, 224)          # C, H, W
RN50_TRAIN_PER_GPU, RN50_VAL_PER_GPU = 2650.0, 7800.0       # images/s of one H100, bf16

# ---------------------------------------------------------------- architectures (ir/src/arch)


def node(name, layer, inputs):
    return {"name": name, "layer": layer, "inputs": list(inputs)}


def conv(out, k, s):
    return {"conv2d": {"out_channels": out, "kernel": k, "stride": s, "padding": k // 2}}


def conv_bn(g, name, x, out, k, s, relu):
    g.append(node(f"{name}.conv", conv(out, k, s), [x]))
    g.append(node(f"{name}.bn", "batch_norm", [len(g) - 1]))
    if relu:
        g.append(node(f"{name}.relu", "relu", [len(g) - 1]))
    return len(g) - 1


def resnet50(input_chw, classes):
    """ResNet-50 v1 in the AIPerf layout, node for node as `aiperf` builds it."""
    c, h, w = input_chw
    g = [node("input", {"input": {"shape": {"c": c, "h": h, "w": w}}}, [])]
    stem = conv_bn(g, "stem", 0, 64, 7, 2, True)
    g.append(node("stem.pool", {"max_pool": {"kernel": 3, "stride": 2, "padding": 1}}, [stem]))
    x, ch = len(g) - 1, 64
    for stage, (blocks, width) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512])):
        for block in range(blocks):
            s = 2 if block == 0 and stage > 0 else 1
            name = f"stage{stage + 1}.block{block}"
            a = conv_bn(g, f"{name}.1", x, width, 1, s, True)
            b = conv_bn(g, f"{name}.2", a, width, 3, 1, True)
            m = conv_bn(g, f"{name}.3", b, 4 * width, 1, 1, False)
            short = conv_bn(g, f"{name}.proj", x, 4 * width, 1, s, False) \
                if s != 1 or ch != 4 * width else x
            g.append(node(f"{name}.add", "add", [m, short]))
            g.append(node(f"{name}.relu", "relu", [len(g) - 1]))
            x, ch = len(g) - 1, 4 * width
    g.append(node("pool", "global_avg_pool", [x]))
    g.append(node("fc", {"dense": {"out_features": classes}}, [len(g) - 1]))
    return g


def deeper(g, after, kernel):
    """The deeper morphism: Conv(C→C, k×k) → BN → ReLU after the main-chain ReLU `after`,
    every reader of `after` now reading the new ReLU; named with the first free `deeperN`."""
    at = next(i for i, n in enumerate(g) if n["name"] == after)
    p = next(f"deeper{n}" for n in range(1000)
             if not any(x["name"].startswith(f"deeper{n}.") for x in g))
    channels = shapes(g)[at][0]
    shift = lambda j: j + 3 if j > at else (at + 3 if j == at else j)  # noqa: E731
    out = []
    for i, n in enumerate(g):
        out.append(dict(n, inputs=[shift(j) for j in n["inputs"]]))
        if i == at:
            out += [node(f"{p}.conv", conv(channels, kernel, 1), [at]),
                    node(f"{p}.bn", "batch_norm", [at + 1]),
                    node(f"{p}.relu", "relu", [at + 2])]
    return out


def to_json(g):
    """As `Graph::to_json` writes it (serde's pretty printer: two-space indents)."""
    return json.dumps({"nodes": g}, indent=2)

# ------------------------------------------------------------ operation counts (ir/src/ops)


def kind(layer):
    return layer if isinstance(layer, str) else next(iter(layer))


def shapes(g):
    """Every node's output (C, H, W)."""
    out = []
    for n in g:
        k, ins = kind(n["layer"]), [out[j] for j in n["inputs"]]
        if k == "input":
            s = n["layer"]["input"]["shape"]
            out.append((s["c"], s["h"], s["w"]))
        elif k in ("conv2d", "max_pool"):
            p = n["layer"][k]
            side = lambda v: (v + 2 * p["padding"] - p["kernel"]) // p["stride"] + 1  # noqa: E731
            c = p["out_channels"] if k == "conv2d" else ins[0][0]
            out.append((c, side(ins[0][1]), side(ins[0][2])))
        elif k == "global_avg_pool":
            out.append((ins[0][0], 1, 1))
        elif k == "dense":
            out.append((n["layer"]["dense"]["out_features"], 1, 1))
        elif k == "concat":
            out.append((sum(s[0] for s in ins), ins[0][1], ins[0][2]))
        else:                                              # batch_norm, relu, add
            out.append(ins[0])
    return out


def op_count(g):
    """(FP per image, BP per image, trainable parameters), docs/design.md §4."""
    sh = shapes(g)
    fp_total, bp_total, params, upstream = 0, 0, 0, []
    for i, n in enumerate(g):
        k, out = kind(n["layer"]), sh[i]
        x = sh[n["inputs"][0]] if n["inputs"] else None
        elems = out[0] * out[1] * out[2]
        fp, w = 0, 0
        if k == "conv2d":
            p = n["layer"]["conv2d"]
            w = p["kernel"] ** 2 * x[0] * p["out_channels"]
            fp = 2 * w * out[1] * out[2]
        elif k == "dense":
            co = n["layer"]["dense"]["out_features"]
            fp, w = 2 * x[0] * x[1] * x[2] * co, x[0] * x[1] * x[2] * co + co
        elif k == "batch_norm":
            fp, w = 7 * elems, 2 * out[0]
        elif k == "relu":
            fp = elems
        elif k == "add":
            fp = (len(n["inputs"]) - 1) * elems
        elif k == "max_pool":
            p = n["layer"]["max_pool"]
            fp = x[0] * x[1] * x[2] * p["kernel"] ** 2 // max(p["stride"] ** 2, 1)
        elif k == "global_avg_pool":
            fp = (x[1] * x[2] - 1) * x[0] + 4 * x[0]
        up = any(upstream[j] for j in n["inputs"])
        upstream.append(up or k in ("conv2d", "dense", "batch_norm"))
        bp = (2 * fp if up else fp) if k == "conv2d" else 2 * fp if k == "dense" else 0
        fp_total, bp_total, params = fp_total + fp, bp_total + bp, params + w
    n = sh[-1][0]
    return fp_total + 8 * n + (n - 1) + 4 * n, bp_total, params

# ------------------------------------------------------------------------- the claimed work


class Model:
    def __init__(self, model_id, group, rnd, father, graph):
        self.id, self.group, self.round, self.father, self.graph = model_id, group, rnd, father, graph
        self.json = to_json(graph)
        self.fp, self.bp, self.params = op_count(graph)
        self.rows, self.status = [], 0


def accuracy(epoch, budget, final, rng):
    """A cosine-schedule learning curve: fast at first, the last gain as the rate anneals."""
    rise = (1 - math.exp(-epoch / 5)) / (1 - math.exp(-budget / 5))
    g = 0.82 * rise + 0.18 * (epoch / budget) ** 3
    return min(final * g + (rng.gauss(0, 0.003) if epoch < budget else 0.0), 1.0)


def epoch_row(m, t, seconds, epoch, acc, rng):
    """One completed epoch of model `m` at time `t` that took `seconds`."""
    g = BATCH * RANKS
    steps = DATASET["train_images"] // g                   # whole global batches, drop_last
    images, val = steps * g, DATASET["val_images"]
    val_loss = 1.6 * -math.log(acc) + 0.6 + rng.gauss(0, 0.01)
    train_loss = 0.75 + 1.15 * val_loss + rng.gauss(0, 0.01)
    busy = seconds * rng.uniform(0.955, 0.975)             # the rest: logging, checkpoints
    exchange, wait = busy * 0.028, busy * 0.012
    return {"time_s": t, "trial": m.round, "model_id": m.id, "epoch": epoch,
            "train_images": images, "steps": steps, "val_images": val,
            "train_ops": images * (m.fp + m.bp) + steps * 2 * m.params, "val_ops": val * m.fp,
            "train_loss": train_loss, "val_loss": val_loss, "val_accuracy": acc,
            "compute_s": busy - exchange - wait, "allreduce_s": exchange,
            "allreduce_bytes": steps * m.params * 4 * 2 * (RANKS - 1) // RANKS,
            "data_wait_s": wait}


def train(m, start, deadline, budget, final, rng):
    """Epochs of `m` from `start` until its budget or the deadline; returns its end."""
    fp0, bp0, _ = op_count(resnet50(INPUT, CLASSES))     # throughput scales with the work
    train_s = DATASET["train_images"] / (RANKS * RN50_TRAIN_PER_GPU * (fp0 + bp0) / (m.fp + m.bp))
    val_s = DATASET["val_images"] / (RANKS * RN50_VAL_PER_GPU * fp0 / m.fp)
    t = start + rng.uniform(14.0, 19.0)                    # build, broadcast, loaders
    for epoch in range(1, budget + 1):
        seconds = (train_s + val_s) * rng.uniform(0.985, 1.015)
        if t + seconds > deadline:
            m.status = 1                                   # stopped by the deadline
            return deadline + rng.uniform(0.3, 0.9)
        t += seconds
        m.rows.append(epoch_row(m, t, seconds, epoch, accuracy(epoch, budget, final, rng), rng))
    return t + rng.uniform(0.2, 0.6)


def predicted(m):
    """What the warm-up rounds report: the final accuracy the curve predicts for 60 epochs."""
    best = max(r["val_accuracy"] for r in m.rows)
    return min(best + 0.11 * (1 - len(m.rows) / EPOCHS) * (1 - best), 0.99)


def claimed_run(rng):
    """Two groups, each a round-0 trial of 15 epochs and a round-1 trial of 30 cut by the
    deadline; group 0 starts from ResNet-50 itself, the others are deeper morphisms."""
    start = resnet50(INPUT, CLASSES)
    deadline = T0 + DURATION
    m0 = Model(0, 0, 0, -1, start)
    m1 = Model(1, 1, 0, -1, deeper(start, "stage4.block2.2.relu", KERNEL))
    finals = {0: 0.7155, 1: 0.7188}
    m0.start_s, m1.start_s = T0 + 11.8, T0 + 12.3
    m0.end_s = train(m0, m0.start_s, deadline, WARMUP[0], finals[0], rng)
    m1.end_s = train(m1, m1.start_s, deadline, WARMUP[0], finals[1], rng)
    assert m0.end_s < m1.end_s, "model ids are given in registration order"
    m2 = Model(2, 0, 1, 0, deeper(start, "stage3.block5.2.relu", KERNEL))
    m3 = Model(3, 1, 1, 1, deeper(m1.graph, "stage4.block1.2.relu", KERNEL))
    for m, father in ((m2, m0), (m3, m1)):
        m.start_s = father.end_s + rng.uniform(0.05, 0.2)
        m.end_s = train(m, m.start_s, deadline, WARMUP[1], 0.752, rng)
    return [m0, m1, m2, m3]

# -------------------------------------------------------------------- the records (schema 4)


STATUS = h5py.enum_dtype({"Finished": 0, "Stopped": 1, "Failed": 2}, basetype="u1")
DIGEST = ("u1", (32,))


def compound(members, offsets, size):
    return np.dtype({"names": [n for n, _ in members], "formats": [f for _, f in members],
                     "offsets": offsets, "itemsize": size})


TRIAL = compound([("model_id", "<u8"), ("father", "<i8"), ("group", "<u4"), ("round", "<u4"),
                  ("batch_size", "<u4"), ("kernel_size", "<u4"), ("epochs", "<u4"),
                  ("best_accuracy", "<f8"), ("reported_accuracy", "<f8"), ("start_s", "<f8"),
                  ("end_s", "<f8"), ("status", STATUS), ("digest", DIGEST)],
                 [0, 8, 16, 20, 24, 28, 32, 40, 48, 56, 64, 72, 73], 112)
TPE = compound([("time_s", "<f8"), ("batch_size", "<u4"), ("kernel_size", "<u4"),
                ("loss", "<f8"), ("digest", DIGEST)], [0, 8, 12, 16, 24], 56)
EPOCH = compound([(n, "<f8" if n in ("time_s", "train_loss", "val_loss", "val_accuracy",
                                     "compute_s", "allreduce_s", "data_wait_s")
                   else "<u4" if n == "epoch" else "<u8") for n in
                  ("time_s", "trial", "model_id", "epoch", "train_images", "steps",
                   "val_images", "train_ops", "val_ops", "train_loss", "val_loss",
                   "val_accuracy", "compute_s", "allreduce_s", "allreduce_bytes",
                   "data_wait_s")] + [("digest", DIGEST)],
                 [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128], 160)
MONITOR = np.dtype([(n, "<f8") for n in
                    ("time_s", "accel_util", "accel_mem_bytes", "cpu_util", "host_mem_bytes")])
STEP = compound([("model_id", "<u8"), ("step", "<u4"), ("train_loss", "<f8"), ("digest", DIGEST)],
                [0, 8, 16, 24], 56)
TRACE = compound([("rank", "<u4"), ("model_id", "<u8"), ("epoch", "<u4"), ("step", "<u4"),
                  ("kind", "u1"), ("bucket", "<u4"), ("start_s", "<f8"), ("end_s", "<f8")],
                 [0, 8, 16, 20, 24, 28, 32, 40], 48)


def early_steps(models, g, rng):
    """Invented losses for each trial's first steps (schema 7): from ln(1000) downwards."""
    out = []
    for m in sorted((m for m in models if m.group == g and m.rows), key=lambda m: m.start_s):
        out += [{"model_id": m.id, "step": s, "train_loss": 6.9 - 0.004 * s + rng.gauss(0, 0.01)}
                for s in range(min(32, m.rows[0]["steps"]))]
    return out


def rows(dtype, dicts):
    out = np.zeros(len(dicts), dtype=dtype)
    for i, d in enumerate(dicts):
        for k, v in d.items():
            out[i][k] = v
    return out


def sealed(file, dataset, table):
    """Carries each row's running digest (results/README.md, tamper evidence)."""
    d = seed(file, dataset)
    for r in table:
        d = hashlib.sha256(d + row_bytes(r)).digest()
        r["digest"] = np.frombuffer(d, dtype=np.uint8)
    return table


def dataset(f, name, data):
    f.create_dataset(name, data=data, chunks=(256,), maxshape=(None,))


def attr(f, name, value, dtype):
    f.attrs.create(name, value, dtype=TEXT if dtype == "text" else dtype)


def compact(value):
    return json.dumps(value, separators=(",", ":"))


def fingerprint(threads, gpus):
    return {"cpu_vendor": "AuthenticAMD", "cpu_model": "AMD EPYC 9454 48-Core Processor",
            "cpu_features": ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                             "avx512_vnni", "avx512_bf16"],
            "aten_capability": "AVX512", "onednn_isa": "avx512_core_bf16",
            "blas": "Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 "
                    "for Intel(R) 64 architecture applications",
            "onednn": "Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71049cd69a3df32adcccb623b12cd7baa22)",
            "libtorch": "2.13.0 cuda 12.8 cudnn 91000",
            "accelerators": ["NVIDIA H100 80GB HBM3"] * gpus, "driver": "570.124.06",
            "threads": threads, "pins": {}, "mpi": "Open MPI v4.1.6"}


def config(world):
    train = {"lr_per_256": 0.1, "momentum": 0.9, "weight_decay": 0.0005, "label_smoothing": 0.1,
             "warmup_epochs": 1.0, "train_images": None, "val_images": None,
             "augment": {"random_resized_crop": {"size": 224, "scale": [0.08, 1.0],
                                                 "ratio": [0.75, 1.3333334]}},
             "val_augment": {"center_crop": {"size": 224}}, "val_batch": 128,
             "loader_workers": 6, "prefetch": 3, "precision": "bf16",
             "exchange": {"method": "allreduce", "bucket_bytes": 26214400,
                          "first_bucket_bytes": 1048576, "staging": "auto", "overlap": True},
             "trace_steps": 0, "augment_on": "auto"}
    preset = {"name": "imagenet", "dataset": "imagenet", "start": "resnet50",
              "duration_s": DURATION, "epochs": EPOCHS, "patience_scale": 1.0,
              "batch_size": [32, 256], "kernel_sizes": [3, 5, 7], "train": train,
              "score_interval_s": 360.0}
    offsets = [0.0] + [round(1e-6 * (-1) ** r * (r % 4 + 1) * 3.7, 9) for r in range(1, world)]
    return {"preset": preset, "trainer": "real", "data": "/scratch/datasets/imagenet",
            "group_size": RANKS, "threads": None,
            "sim": {"ops": 1e13, "train_images": 50000, "val_images": 10000, "speedup": 100.0,
                    "input": "32x32x3", "classes": 10},
            "seed": 20261203, "search_threads": 8,
            "intervals": {"status_s": 60.0, "stall_timeout_s": 7200.0, "monitor_s": 30.0},
            "clock_offsets_s": offsets,
            "clock_uncertainty_s": [0.0] + [2.1e-5 if r > RANKS else 3.1e-6
                                            for r in range(1, world)]}


def monitor(rng):
    """The group leader's samples every 30 s, from one interval after the start."""
    return [{"time_s": T0 + 30.0 * k + rng.uniform(0, 0.02),
             "accel_util": rng.uniform(0.9, 0.97), "accel_mem_bytes": 4 * rng.uniform(5.9e10, 6.1e10),
             "cpu_util": rng.uniform(0.38, 0.47), "host_mem_bytes": rng.uniform(1.7e11, 1.8e11)}
            for k in range(1, int(DURATION // 30.0) + 1)]


def ceilings(world):
    """Each training rank's start-up ceiling: an H100's bf16 matrix product (n = 8192) and
    3×3 convolution, at rates such a GPU reaches."""
    return [{"rank": r, "host": "gpu-a017" if r <= RANKS else "gpu-a018",
             "device": f"cuda:{(r - 1) % RANKS}", "precision": "bf16", "threads": 1,
             "gemm_n": 8192, "gemm_ops_per_s": 7.31e14 + 1.0e12 * (r % 3),
             "conv": "3×3 convolution 64→64 channels, 56×56, batch 256, channels-last",
             "conv_ops_per_s": 3.12e14, "reps": 5} for r in range(1, world)]


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    if out.exists():
        print(f"{out} exists: refusing to write into it", file=sys.stderr)
        return 2
    out.mkdir(parents=True)
    rng = random.Random(20261203)
    models = claimed_run(rng)
    world = 1 + GROUPS * RANKS
    hosts = ["gpu-a017"] * (1 + RANKS) + ["gpu-a018"] * RANKS
    devices = ["primary"] + [f"cuda:{r % RANKS}" for r in range(GROUPS * RANKS)]
    platform = [{"ranks": [0], "hosts": ["gpu-a017"], "fingerprint": fingerprint(1, RANKS)},
                {"ranks": list(range(1, world)), "hosts": ["gpu-a017", "gpu-a018"],
                 "fingerprint": fingerprint(12, RANKS)}]
    group_digests = []
    for g in range(GROUPS):
        name = f"group-{g}.h5"
        epochs = sorted((r for m in models if m.group == g for r in m.rows),
                        key=lambda r: r["time_s"])
        with h5py.File(out / name, "w") as f:
            attr(f, "schema_version", SCHEMA, "<u4")
            attr(f, "group", g, "<u4")
            attr(f, "accelerators", RANKS, "<u4")
            tables = {"epochs": sealed(name, "epochs", rows(EPOCH, epochs)),
                      "monitor": rows(MONITOR, monitor(rng)), "trace": rows(TRACE, []),
                      "steps": sealed(name, "steps", rows(STEP, early_steps(models, g, rng)))}
            for d, table in tables.items():
                dataset(f, d, table)
            ends = [chain(name, d, table, []) for d, table in tables.items()]
        group_digests.append({"group": g, "ranks": RANKS, "chains": ends})
    done = sorted(models, key=lambda m: m.end_s)            # results in the order they came
    trials, tpe = [], []
    for m in done:
        best = max(r["val_accuracy"] for r in m.rows)
        reported = predicted(m)            # warm-up rounds report a prediction
        trials.append({"model_id": m.id, "father": m.father, "group": m.group, "round": m.round,
                       "batch_size": BATCH, "kernel_size": KERNEL, "epochs": len(m.rows),
                       "best_accuracy": best, "reported_accuracy": reported,
                       "start_s": m.start_s, "end_s": m.end_s, "status": m.status})
        tpe.append({"time_s": m.end_s, "batch_size": BATCH, "kernel_size": KERNEL,
                    "loss": 1.0 - reported})
    cfg = config(world)
    with h5py.File(out / "primary.h5", "w") as p:
        for name, value, dtype in [
                ("schema_version", SCHEMA, "<u4"),
                ("program_version", "0.1.0 (commit b1f00cee6009)", "text"),
                ("rules_version", "aiperf-rules-6", "text"), ("config", compact(cfg), "text"),
                ("start_time_s", T0, "<f8"), ("end_time_s", T0 + DURATION, "<f8"),
                ("world_size", world, "<u4"), ("groups", GROUPS, "<u4"),
                ("accelerators", world - 1, "<u4"), ("hosts", compact(hosts), "text"),
                ("devices", compact(devices), "text"), ("seed", cfg["seed"], "<u8"),
                ("dataset", "imagenet", "text"), ("start_architecture", "resnet50", "text"),
                ("precision", "bf16", "text"), ("dataset_identity", compact(DATASET), "text"),
                ("search", compact(SEARCH), "text"), ("platform", compact(platform), "text"),
                ("ceilings", compact(ceilings(world)), "text")]:
            attr(p, name, value, dtype)
        dataset(p, "trials", sealed("primary.h5", "trials", rows(TRIAL, trials)))
        dataset(p, "architecture_ids", np.array([m.id for m in models], dtype="<u8"))
        dataset(p, "architectures", np.array([m.json for m in models], dtype=TEXT))
        dataset(p, "tpe", sealed("primary.h5", "tpe", rows(TPE, tpe)))
        own = [chain("primary.h5", "trials", p["trials"][:], []), architectures(p),
               chain("primary.h5", "tpe", p["tpe"][:], [])]
        attr(p, "group_digests", compact(group_digests), "text")
        attr(p, "primary_digests", compact(own), "text")
        digest = run_digest(p)
        attr(p, "run_digest", digest, "text")
    print(f"run digest {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
