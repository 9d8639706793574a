"""PyTorch eager peer of benches/trainer.rs (run by scripts/bench/bench-train): the same
architecture (rebuilt from aiperf's IR JSON by scripts/bench/flops_torch.py's IrNet), batch size,
thread count, SGD settings and label smoothing, on random inputs of the same shape (the
arithmetic does not depend on the values). Prints one JSON object per repetition.

Arguments: ARCH_JSON BATCH STEPS THREADS REPS [DEVICE [PRECISION [MEMORY_FORMAT]]]; DEVICE
cpu (default) or cuda, PRECISION fp32 (default), fp16 (CUDA only: torch.autocast with a
GradScaler, as aiperf's trainer scales its loss) or bf16 (torch.autocast in bfloat16, no
scaler, on either device), MEMORY_FORMAT nchw (default) or channels-last (the model and the
batches in torch.channels_last, as PyTorch's performance guide recommends)."""

import json
import os
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flops_torch import IrNet  # noqa: E402


def main():
    arch, batch, steps, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    device = sys.argv[6] if len(sys.argv) > 6 else "cpu"
    precision = sys.argv[7] if len(sys.argv) > 7 else "fp32"
    layout = sys.argv[8] if len(sys.argv) > 8 else "nchw"
    if device not in ("cpu", "cuda") or precision not in ("fp32", "fp16", "bf16") or layout not in ("nchw", "channels-last"):
        sys.exit(f"bench_train_torch.py: device must be cpu or cuda, precision fp32, fp16 or bf16 and the format nchw or channels-last, not {device} {precision} {layout}")
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_train_torch.py: device cuda, but torch sees no CUDA device")
    if precision == "fp16" and device != "cuda":
        sys.exit("bench_train_torch.py: fp16 needs device cuda")
    torch.set_num_threads(threads)
    with open(arch) as f:
        graph = json.load(f)
    net = IrNet(graph).to(device)
    c, h, w = net.shapes[0]
    classes = net.shapes[-1][0]
    opt = torch.optim.SGD(net.parameters(), lr=0.1 * batch / 256, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    xs = torch.randn(batch * 8, c, h, w, device=device)
    if layout == "channels-last":
        net = net.to(memory_format=torch.channels_last)
        xs = xs.contiguous(memory_format=torch.channels_last)
    ys = torch.randint(0, classes, (batch * 8,), device=device)
    amp = precision != "fp32"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
    net.train()
    for rep in range(reps):
        t = time.perf_counter()
        for step in range(steps):
            k = (step % 8) * batch
            with torch.autocast(device_type=device, dtype=dtype, enabled=amp):
                out = net(xs[k:k + batch])
            loss = loss_fn(out.float(), ys[k:k + batch])
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            loss.item()
        secs = time.perf_counter() - t
        print(json.dumps({"impl": "pytorch-eager", "device": device, "precision": precision, "memory_format": layout, "batch": batch,
                          "threads": threads, "rep": rep, "images": batch * steps, "seconds": secs,
                          "images_per_s": batch * steps / secs}), flush=True)


if __name__ == "__main__":
    main()
