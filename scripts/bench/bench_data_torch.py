"""PyTorch DataLoader peer for scripts/bench/bench-data: the same packed split, the same
augmentation (torchvision v2 RandomCrop(padding) + RandomHorizontalFlip; RandomResizedCrop
(bilinear, no antialias, as aiperf) + RandomHorizontalFlip; CenterCrop; or none), the same
normalisation, batch size and worker count. Prints one JSON object per epoch."""

import argparse
import json
import struct
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2


def read_header(path):
    with open(path, "rb") as f:
        pre = f.read(32)
        assert pre[:8] == b"AIPERFPK", f"{path}: not an aiperf pack"
        off, length = struct.unpack("<QQ", pre[16:32])
        f.seek(off)
        return json.loads(f.read(length))


class PackDataset(Dataset):
    def __init__(self, path, transform):
        h = read_header(path)
        n, c, hh, ww = h["num_samples"], h["channels"], h["height"], h["width"]
        self.images = np.memmap(path, np.uint8, "r", h["images_offset"], (n, c, hh, ww))
        self.labels = np.memmap(path, "<u2", "r", h["labels_offset"], (n,))
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = torch.from_numpy(np.array(self.images[i]))
        return self.transform(x), int(self.labels[i])


def augment_name(a):
    if a.rrc > 0:
        return f"random-resized-crop:{a.rrc}"
    if a.center > 0:
        return f"center-crop:{a.center}"
    return f"crop-flip:{a.pad}" if a.pad >= 0 else "none"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pack", required=True)
    ap.add_argument("--pad", type=int, default=-1, help="crop-flip padding; -1 = no augmentation")
    ap.add_argument("--rrc", type=int, default=0, help="RandomResizedCrop(SIZE) + flip")
    ap.add_argument("--center", type=int, default=0, help="CenterCrop(SIZE)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    h = read_header(a.pack)
    steps = []
    if a.pad >= 0:
        steps += [v2.RandomCrop((h["height"], h["width"]), padding=a.pad), v2.RandomHorizontalFlip()]
    if a.rrc > 0:
        steps += [v2.RandomResizedCrop(a.rrc, antialias=False), v2.RandomHorizontalFlip()]
    if a.center > 0:
        steps += [v2.CenterCrop(a.center)]
    steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(h["channel_mean"], h["channel_std"])]
    ds = PackDataset(a.pack, v2.Compose(steps))
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, persistent_workers=True)
    for rep in range(a.reps + 1):  # rep 0 warms up (worker start, page cache)
        t = time.perf_counter()
        n = sum(x.shape[0] for x, _ in dl)
        s = time.perf_counter() - t
        if rep > 0:
            print(json.dumps({"impl": "pytorch", "dataset": h["source"]["dataset"], "split": h["split"],
                              "augment": augment_name(a), "workers": a.workers,
                              "batch": a.batch, "rep": rep, "images": n, "seconds": s, "images_per_s": n / s}),
                  flush=True)


if __name__ == "__main__":
    main()
