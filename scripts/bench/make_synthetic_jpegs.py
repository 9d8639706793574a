"""Synthetic ImageNet-layout JPEGs for scripts/bench/bench-data: train/<wnid>/*.JPEG and
val/<wnid>/*.JPEG, photo-like sizes (shorter side 300-500, aspect 3:4 to 4:3) and content
(smooth colour gradients, shapes and mild noise, so the files are the size and decode cost
of real photos rather than of noise or flat colour). Deterministic for a given seed.

usage: make_synthetic_jpegs.py OUT TRAIN_PER_CLASS VAL_PER_CLASS [CLASSES]"""

import os
import sys

import numpy as np
from PIL import Image, ImageDraw


def image(rng, w, h):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = rng.uniform(0, 255, 3)
    gx, gy = rng.uniform(-0.4, 0.4, 3), rng.uniform(-0.4, 0.4, 3)
    rgb = base + x[..., None] * gx + y[..., None] * gy
    rgb += rng.normal(0, 12, (h, w, 3))
    img = Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(rng.integers(3, 9)):
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        x1, y1 = x0 + rng.integers(20, w // 2), y0 + rng.integers(20, h // 2)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x0, y0, x1, y1], fill=colour)
    return img


def main():
    out, train_n, val_n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    classes = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    rng = np.random.default_rng(2020)
    for split, per in (("train", train_n), ("val", val_n)):
        for c in range(classes):
            folder = os.path.join(out, split, f"n{c:08d}")
            os.makedirs(folder, exist_ok=True)
            for i in range(per):
                short = int(rng.integers(300, 501))
                aspect = float(np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3))))
                w, h = (int(short * aspect), short) if aspect >= 1 else (short, int(short / aspect))
                path = os.path.join(folder, f"{split}_{c}_{i}.JPEG")
                image(rng, w, h).save(path, "JPEG", quality=90)
    print(f"wrote {classes} classes x ({train_n} train + {val_n} val) JPEGs under {out}")


if __name__ == "__main__":
    main()
