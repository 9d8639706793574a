#!/usr/bin/env python3
"""How soon two platforms' rounding parts one training (scripts/bench/bench-early-steps): trains a
small residual CNN with SGD and momentum for STEPS steps on fixed random data from a fixed
seed, one thread, and prints each step's loss as exact floats, one line, plus the CPU
capability libtorch used on stderr. Run it twice — natively and with the kernels pinned
(ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS) — and compare, or once
with another --seed to see how far another seed moves the same steps.

    python3 scripts/bench/bench_early_steps.py [--steps N] [--seed S]
"""
import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, w=16):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(1, w, 3, padding=1), nn.BatchNorm2d(w)
        self.c2, self.b2 = nn.Conv2d(w, w, 3, padding=1), nn.BatchNorm2d(w)
        self.c3, self.b3 = nn.Conv2d(w, 2 * w, 3, stride=2, padding=1), nn.BatchNorm2d(2 * w)
        self.fc = nn.Linear(2 * w, 10)

    def forward(self, x):
        x = F.relu(self.b1(self.c1(x)))
        x = F.relu(x + self.b2(self.c2(x)))
        x = F.relu(self.b3(self.c3(x)))
        return self.fc(x.mean((2, 3)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(64 * a.steps, 1, 28, 28, generator=g)
    y = (x[:, 0, :14, :14].mean((1, 2)) * 40).long() % 10
    torch.manual_seed(a.seed)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for s in range(a.steps):
        loss = F.cross_entropy(model(x[s * 64:(s + 1) * 64]), y[s * 64:(s + 1) * 64])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(torch.backends.cpu.get_cpu_capability(), file=sys.stderr)
    print(" ".join(repr(v) for v in losses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
