"""The figures and the verdict of scripts/tools/gpu-check: reads what its steps wrote (WORK) and
writes OUTDIR/figures.json and OUTDIR/summary.md. Exits 0 when every check passed, 1 if not.

Arguments: WORK OUTDIR GPU(0|1) SECONDS RUN_S BENCH_BATCH BENCH_STEPS AUG_SIZE."""

import json
import os
import re
import statistics
import sys

MIB = 1 << 20


def read(work, name):
    try:
        with open(os.path.join(work, name + ".out"), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def json_lines(text):
    """Every line of `text` that is a JSON object (the tools' stdout among log lines)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def score_json(text):
    """The array `aiperf score --json` prints (pretty, so over several lines)."""
    m = re.search(r"^\[", text, re.M)
    if not m:
        return None
    try:
        scores, _ = json.JSONDecoder().raw_decode(text[m.start():])
        return scores[0]
    except (ValueError, IndexError):
        return None


class Checks:
    def __init__(self, gpu):
        self.gpu, self.rows = gpu, []

    def add(self, what, ok, detail="", gpu_only=False):
        if gpu_only and not self.gpu:
            self.rows.append((what, "n/a (no GPU)", detail))
        else:
            self.rows.append((what, "pass" if ok else "FAIL", detail))

    def passed(self):
        return all(r[1] != "FAIL" for r in self.rows)


def doctor(work, checks):
    ranks = [r for r in json_lines(read(work, "doctor")) if "mpi_rank" in r]
    ranks.sort(key=lambda r: r["mpi_rank"])
    checks.add("doctor answers on 2 ranks", len(ranks) == 2)
    cuda = bool(ranks) and all(r["cuda_available"] and r["cuda_devices"] >= 1 for r in ranks)
    names = ranks[0]["accelerators"]["names"] if ranks else []
    checks.add("doctor: libtorch sees CUDA", cuda, f"{ranks[0]['cuda_devices'] if ranks else 0} device(s)", True)
    checks.add("doctor: NVML names the GPU", bool(names), ", ".join(names) or (ranks[0]["accelerators"]["nvml"] if ranks else ""), True)
    return ranks[0] if ranks else None


def dp_checks(work, checks, steps):
    out = {}
    for name in ("dp-host", "dp-host-after", "dp-auto", "dp-frozen-bn", "dp-device", "dp-device-after"):
        if steps.get(name, "").startswith("not run"):
            out[name] = None
            continue
        reports = [r for r in json_lines(read(work, name)) if "identical" in r]
        r = reports[-1] if reports else None
        out[name] = r
        ok = r is not None and r["identical"] and r["ranks"] == 2
        checks.add(f"{name}: 2 ranks bit-identical", ok, r["device"] if r else steps.get(name, "no report"))
        if r is not None:
            checks.add(f"{name}: trained on the GPU", r["device"].startswith("cuda"), r["device"], True)
            # Overlap with backward on the path this staging takes (the copying path for host
            # staging, gradient views for device staging); how many steps had a reduction
            # start inside backward is timing, reported and not required.
            if name.endswith("-after"):
                continue
            steps_over = r.get("overlapped_steps", 0)
            checks.add(f"{name}: exchange overlapped with backward", steps_over > 0,
                       f"{steps_over} of {len(r['losses'])} steps overlapped, "
                       f"{r.get('during_backward', 0)} with a reduction started inside backward")
    # The same sums overlapped or not: ranks agreeing would not show a bucket read before the
    # device had written it, the training would, against its twin. On the CPU bit for bit;
    # on CUDA within 1e-5 relative, since cuDNN's backward may itself differ between runs in
    # the last bits, while a bucket of stale or missing gradients moves SGD by far more.
    for name in ("dp-host", "dp-device"):
        a, b = out.get(name), out.get(f"{name}-after")
        if a is None or b is None:
            continue
        pairs = [(a["param_sum"], b["param_sum"])] + list(zip(a["losses"], b["losses"]))
        worst = max(abs(x - y) / max(abs(x), abs(y), 1e-30) for x, y in pairs)
        exact = a["device"] == "cpu"
        same = len(a["losses"]) == len(b["losses"]) and (worst == 0.0 if exact else worst <= 1e-5)
        checks.add(f"{name}: overlapped trains as after backward", same,
                   f"largest relative difference {worst:.3g} ({'exact' if exact else '1e-5'} required)")
    return out


def runs(work, checks, steps, gpu):
    out = {}
    for prec in ("fp32", "fp16", "bf16"):
        if f"run-{prec}" not in steps:
            continue
        if steps[f"run-{prec}"].startswith("not run"):
            out[prec] = None
            continue
        s = score_json(read(work, f"score-{prec}"))
        ok = s is not None and s["epochs"] > 0 and s["ops_per_s"] > 0
        checks.add(f"run {prec}: completed and scored", ok, steps.get(f"run-{prec}", ""))
        if s is None:
            out[prec] = None
            continue
        r = s["resources"]
        out[prec] = {k: s[k] for k in ("ops_per_s", "regulated", "best_accuracy", "epochs", "trials",
                                         "steps", "duration_s", "busy_fraction", "compute_s",
                                         "data_wait_s", "allreduce_s")}
        out[prec].update({"verdict": s["verdict"]["status"], "records": s["integrity"]["records"],
                          "steady_ops_per_s": s["stability"].get("steady_ops_per_s"), "resources": r})
        checks.add(f"run {prec}: records intact", s["integrity"]["records"] == "intact", s["integrity"]["records"])
        mem = (r["accel_mem_peak_bytes"] or 0) > 0
        detail = f"{r['accel_samples']} of {r['samples']} samples with utilisation"
        if mem and not r["accel_samples"]:
            detail += "; memory only (a MIG-partitioned GPU reports no utilisation)"
        checks.add(f"run {prec}: NVML monitor rows (utilisation, memory)",
                   r["accel_samples"] > 0 and r["accel_util_mean"] is not None and mem, detail, True)
    return out


def bench(outdir, checks, gpu):
    rows = []
    try:
        with open(os.path.join(outdir, "bench.jsonl")) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        pass
    out = {}
    for prec in ("fp32", "fp16", "bf16") if gpu else ("fp32",):
        med = {}
        for impl in ("aiperf", "bare-tch", "pytorch-eager"):
            v = [r["images_per_s"] for r in rows if r["impl"] == impl and r.get("precision", "fp32") == prec]
            # The first repetition warms up (CUDA context, cuDNN's choices): the median of
            # the rest, when there is a rest.
            v = v[1:] if len(v) > 1 else v
            med[impl] = statistics.median(v) if v else None
        ok = all(med.values())
        checks.add(f"trainer benchmark {prec}: aiperf, bare tch and PyTorch eager ran", ok)
        ratio = lambda a, b: med[a] / med[b] if med[a] and med[b] else None  # noqa: E731
        out[prec] = {"images_per_s": med, "aiperf_over_pytorch": ratio("aiperf", "pytorch-eager"),
                     "aiperf_over_bare_tch": ratio("aiperf", "bare-tch")}
    return out


def augment(work, checks):
    out = {}
    for on in ("cpu", "device"):
        m = re.search(r"epoch 0: (\d+) images in ([0-9.]+) s \((\d+) images/s\)", read(work, f"augment-{on}"))
        out[on] = float(m.group(3)) if m else None
        checks.add(f"augmentation on {on}: delivered every image", m is not None)
    out["device_over_cpu"] = out["device"] / out["cpu"] if out["cpu"] and out["device"] else None
    return out


def fmt(v, unit="", digits=1):
    if v is None:
        return "-"
    for p, f in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= f and unit:
            return f"{v / f:.{digits + 1}f} {p}{unit}"
    return f"{v:.{digits}f}{' ' + unit if unit else ''}"


def markdown(fig, checks):
    m = fig["machine"]
    lines = [f"# aiperf gpu-check: {'GPU' if fig['gpu'] else 'CPU rehearsal (no GPU: GPU checks not run)'}", "",
             f"{m['gpu'] or 'no GPU'}; torch {m['torch']}; {fig['seconds']} s in all.", "",
             "| check | result | detail |", "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in checks.rows]
    lines += ["", f"## aiperf run, fashion-mnist preset, {fig['run_s']} s each", "",
              "| precision | sustained OPS | regulated | steady OPS | best accuracy | epochs | accel util (NVML mean / max) | accel memory peak | busy |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for prec, r in fig["runs"].items():
        if r is None:
            lines.append(f"| {prec} | not run | | | | | | | |")
            continue
        res = r["resources"]
        util = "-" if res["accel_util_mean"] is None else f"{100 * res['accel_util_mean']:.0f}% / {100 * res['accel_util_max']:.0f}%"
        mem = "-" if res["accel_mem_peak_bytes"] is None else f"{res['accel_mem_peak_bytes'] / MIB:.0f} MiB"
        lines.append(f"| {prec} | {fmt(r['ops_per_s'], 'OPS', 2)} | {fmt(r['regulated'], 'OPS', 2)} | "
                     f"{fmt(r['steady_ops_per_s'], 'OPS', 2)} | {r['best_accuracy']:.4f} | {r['epochs']} | {util} | {mem} | "
                     f"{100 * r['busy_fraction']:.0f}% |")
    for prec in ("fp16", "bf16"):
        if fig.get(f"{prec}_over_fp32"):
            lines += ["", f"{prec} / fp32 sustained OPS: {fig[f'{prec}_over_fp32']:.2f}x"]
    lines += ["", f"## Training overhead: resnet8, batch {fig['bench_batch']}, {fig['bench_steps']} steps per measurement (median images/s)", "",
              "| precision | aiperf trainer | bare tch loop | PyTorch eager | aiperf / PyTorch | aiperf / bare tch |",
              "| --- | --- | --- | --- | --- | --- |"]
    for prec, b in fig["bench"].items():
        i = b["images_per_s"]
        lines.append(f"| {prec} | {fmt(i['aiperf'])} | {fmt(i['bare-tch'])} | {fmt(i['pytorch-eager'])} | "
                     f"{fmt(b['aiperf_over_pytorch'], '', 3)} | {fmt(b['aiperf_over_bare_tch'], '', 3)} |")
    a = fig["augment"]
    lines += ["", f"## Augmentation, random-resized-crop:{fig['aug_size']}, Fashion-MNIST val, delivered to {fig['device']}", "",
              f"loader threads: {fmt(a['cpu'])} images/s; on the device: {fmt(a['device'])} images/s; "
              f"ratio {fmt(a['device_over_cpu'], '', 2)}", "", "## Steps", "", "| step | outcome | seconds |", "| --- | --- | --- |"]
    lines += [f"| {n} | {s} | {t} |" for n, (s, t) in fig["steps"].items()]
    return "\n".join(lines) + "\n"


def main():
    work, outdir, gpu = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    seconds, run_s, batch, steps_n, aug = sys.argv[4:9]
    steps = {}
    with open(os.path.join(work, "steps.tsv")) as f:
        for line in f:
            name, status, secs = line.rstrip("\n").split("\t")
            steps[name] = (status, int(secs))
    status = {k: v[0] for k, v in steps.items()}
    checks = Checks(gpu)
    failed = [k for k, v in status.items() if v != "ok" and not v.startswith("not run")]
    checks.add("every step ran to completion", not failed, ", ".join(failed))
    # The bound for one GPU: scripts/tools/gpu-check runs in one call of under 8 minutes.
    checks.add("the whole check took under 8 minutes", int(seconds) < 480, f"{seconds} s", True)
    machine = read(work, "machine")
    gpu_line = re.search(r"^name, memory.total.*\n(.+)$", machine, re.M)
    torch_line = re.search(r"^--- torch \(version, folder, CUDA\): (\S+)", machine, re.M)
    fig = {"gpu": gpu, "device": "cuda" if gpu else "cpu", "seconds": int(seconds), "run_s": int(run_s),
           "bench_batch": int(batch), "bench_steps": int(steps_n), "aug_size": int(aug),
           "machine": {"gpu": gpu_line.group(1).strip() if gpu_line else None,
                       "torch": torch_line.group(1) if torch_line else None}}
    fig["doctor"] = doctor(work, checks)
    fig["dp_check"] = dp_checks(work, checks, status)
    fig["runs"] = runs(work, checks, status, gpu)
    r32 = fig["runs"].get("fp32")
    for prec in ("fp16", "bf16"):
        r = fig["runs"].get(prec)
        fig[f"{prec}_over_fp32"] = r["ops_per_s"] / r32["ops_per_s"] if r32 and r and r32["ops_per_s"] else None
    fig["bench"] = bench(outdir, checks, gpu)
    fig["augment"] = augment(work, checks)
    fig["steps"] = {k: list(v) for k, v in steps.items()}
    fig["checks"] = [{"check": a, "result": b, "detail": c} for a, b, c in checks.rows]
    fig["passed"] = checks.passed()
    with open(os.path.join(outdir, "figures.json"), "w") as f:
        json.dump(fig, f, indent=1)
    text = markdown(fig, checks)
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    sys.exit(0 if fig["passed"] else 1)


if __name__ == "__main__":
    main()
