"""Independent check of aiperf's op counts (used by tests/flops_pytorch.rs): rebuilds an
architecture from aiperf's IR JSON as a PyTorch module and counts its forward FLOPs with
torch.utils.flop_counter.FlopCounterMode (2 FLOPs per multiply-accumulate; it counts
convolutions and matrix products). Prints {"flops": ..., "params": ..., "by_op": {...}}."""

import json
import sys

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


class IrNet(nn.Module):
    def __init__(self, graph):
        super().__init__()
        self.nodes = graph["nodes"]
        self.mods = nn.ModuleDict()
        shapes = []
        for i, node in enumerate(self.nodes):
            layer = node["layer"]
            kind, args = (layer, {}) if isinstance(layer, str) else next(iter(layer.items()))
            ins = [shapes[j] for j in node["inputs"]]
            key = str(i)
            if kind == "input":
                s = args["shape"]
                shape = (s["c"], s["h"], s["w"])
            elif kind == "conv2d":
                c, h, w = ins[0]
                k, st, p, o = args["kernel"], args["stride"], args["padding"], args["out_channels"]
                self.mods[key] = nn.Conv2d(c, o, k, st, p, bias=False)
                shape = (o, (h + 2 * p - k) // st + 1, (w + 2 * p - k) // st + 1)
            elif kind == "batch_norm":
                self.mods[key] = nn.BatchNorm2d(ins[0][0])
                shape = ins[0]
            elif kind == "max_pool":
                c, h, w = ins[0]
                k, st, p = args["kernel"], args["stride"], args["padding"]
                self.mods[key] = nn.MaxPool2d(k, st, p)
                shape = (c, (h + 2 * p - k) // st + 1, (w + 2 * p - k) // st + 1)
            elif kind == "global_avg_pool":
                self.mods[key] = nn.AdaptiveAvgPool2d(1)
                shape = (ins[0][0], 1, 1)
            elif kind == "dense":
                c, h, w = ins[0]
                self.mods[key] = nn.Linear(c * h * w, args["out_features"])
                shape = (args["out_features"], 1, 1)
            elif kind in ("relu", "add"):
                shape = ins[0]
            elif kind == "concat":
                shape = (sum(s[0] for s in ins), ins[0][1], ins[0][2])
            else:
                raise ValueError(f"node {i}: unknown layer {kind!r}")
            shapes.append(shape)
        self.shapes = shapes

    def forward(self, x):
        outs = []
        for i, node in enumerate(self.nodes):
            layer = node["layer"]
            kind = layer if isinstance(layer, str) else next(iter(layer))
            ins = [outs[j] for j in node["inputs"]]
            if kind == "input":
                y = x
            elif kind == "dense":
                y = self.mods[str(i)](torch.flatten(ins[0], 1))
            elif kind == "relu":
                y = torch.relu(ins[0])
            elif kind == "add":
                y = ins[0]
                for t in ins[1:]:
                    y = y + t
            elif kind == "concat":
                y = torch.cat(ins, 1)
            else:
                y = self.mods[str(i)](ins[0])
            outs.append(y)
        return outs[-1]


def main():
    graph = json.load(open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin)
    net = IrNet(graph).eval()
    c, h, w = net.shapes[0]
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        net(torch.zeros(1, c, h, w))
    by_op = {str(k): int(v) for k, v in counter.get_flop_counts()["Global"].items()}
    print(json.dumps({"flops": int(counter.get_total_flops()),
                      "params": sum(p.numel() for p in net.parameters()),
                      "by_op": by_op}))


if __name__ == "__main__":
    main()
