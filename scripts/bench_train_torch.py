"""PyTorch eager peer of benches/trainer.rs (run by scripts/bench-train): the same
architecture (rebuilt from aiperf's IR JSON by scripts/flops_torch.py's IrNet), batch size,
thread count, SGD settings and label smoothing, on random inputs of the same shape (the
arithmetic does not depend on the values). Prints one JSON object per repetition."""

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
    torch.set_num_threads(threads)
    with open(arch) as f:
        graph = json.load(f)
    net = IrNet(graph)
    c, h, w = net.shapes[0]
    classes = net.shapes[-1][0]
    opt = torch.optim.SGD(net.parameters(), lr=0.1 * batch / 256, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    xs = torch.randn(batch * 8, c, h, w)
    ys = torch.randint(0, classes, (batch * 8,))
    net.train()
    for rep in range(reps):
        t = time.perf_counter()
        for step in range(steps):
            k = (step % 8) * batch
            loss = loss_fn(net(xs[k:k + batch]), ys[k:k + batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
        secs = time.perf_counter() - t
        print(json.dumps({"impl": "pytorch-eager", "batch": batch, "threads": threads, "rep": rep,
                          "images": batch * steps, "seconds": secs, "images_per_s": batch * steps / secs}))


if __name__ == "__main__":
    main()
