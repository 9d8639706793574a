//! Per-sample augmentation fused with normalisation: u8 C×H×W in, f32 C×H'×W' out, with the
//! random choices drawn from a generator seeded per (seed, epoch, sample), so results do not
//! depend on thread count or scheduling. Semantics follow torchvision's `RandomCrop(padding)`
//! + `RandomHorizontalFlip`, `RandomResizedCrop` (bilinear) and `CenterCrop`.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// The largest output side or padding an augmentation may ask for, in pixels.
pub const MAX_SIDE: u32 = 4096;

/// The augmentation applied to each sample.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Augment {
    /// Normalise only.
    None,
    /// Small images: pad by `pad` zero pixels on each side, random crop back to the stored
    /// size, horizontal flip with probability ½.
    CropFlip {
        /// Zero padding in pixels on each side.
        pad: u32,
    },
    /// ImageNet training: a random area/aspect crop resized (bilinear) to `size`×`size`,
    /// horizontal flip with probability ½.
    RandomResizedCrop {
        /// Output side in pixels.
        size: u32,
        /// Range of the crop's area as a fraction of the image (torchvision: 0.08..1).
        scale: (f32, f32),
        /// Range of the crop's aspect ratio w/h (torchvision: 3/4..4/3).
        ratio: (f32, f32),
    },
    /// Validation: the central `size`×`size` window.
    CenterCrop {
        /// Output side in pixels.
        size: u32,
    },
}

impl Augment {
    /// torchvision's `RandomResizedCrop(size)` defaults.
    pub fn random_resized_crop(size: u32) -> Self {
        Augment::RandomResizedCrop {
            size,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        }
    }

    /// Output (height, width) for stored images of `h`×`w`.
    pub fn output_hw(&self, h: u32, w: u32) -> (u32, u32) {
        match *self {
            Augment::None | Augment::CropFlip { .. } => (h, w),
            Augment::RandomResizedCrop { size, .. } | Augment::CenterCrop { size } => (size, size),
        }
    }

    /// Checks the parameters alone (no image size needed): sizes and paddings in range.
    pub fn check_params(&self) -> Result<(), String> {
        match *self {
            Augment::None => Ok(()),
            Augment::CropFlip { pad } if pad > MAX_SIDE => {
                Err(format!("crop-flip padding {pad} exceeds {MAX_SIDE} pixels"))
            }
            Augment::RandomResizedCrop { size, scale, ratio } => {
                let range_ok =
                    |(a, b): (f32, f32)| a.is_finite() && b.is_finite() && 0.0 < a && a <= b;
                if size == 0 || size > MAX_SIDE {
                    Err(format!(
                        "random-resized-crop size must be in 1..={MAX_SIDE}, got {size}"
                    ))
                } else if !range_ok(scale) || scale.1 > 1.0 || !range_ok(ratio) || ratio.1 > 100.0 {
                    Err(format!("random-resized-crop needs 0 < scale.min <= scale.max <= 1 and 0 < ratio.min <= ratio.max <= 100, got scale {scale:?}, ratio {ratio:?}"))
                } else {
                    Ok(())
                }
            }
            Augment::CenterCrop { size } if size == 0 || size > MAX_SIDE => Err(format!(
                "center-crop size must be in 1..={MAX_SIDE}, got {size}"
            )),
            _ => Ok(()),
        }
    }

    /// Checks that this augmentation fits stored images of `h`×`w`: a crop-flip padding
    /// smaller than the image, a centre crop no larger than it.
    pub fn check_fits(&self, h: u32, w: u32) -> Result<(), String> {
        self.check_params()?;
        let side = h.min(w);
        match *self {
            Augment::CropFlip { pad } if pad >= side => Err(format!(
                "crop-flip padding {pad} must be smaller than the {h}x{w} images (use at most {})",
                side.saturating_sub(1)
            )),
            Augment::CenterCrop { size } if size > side => Err(format!(
                "center-crop {size} does not fit the {h}x{w} images"
            )),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for Augment {
    /// The command line's spelling (`random-resized-crop:SIZE` names torchvision's default
    /// scale and ratio; other ranges are shown after it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Augment::None => write!(f, "none"),
            Augment::CropFlip { pad } => write!(f, "crop-flip:{pad}"),
            Augment::CenterCrop { size } => write!(f, "center-crop:{size}"),
            Augment::RandomResizedCrop { size, .. }
                if *self == Augment::random_resized_crop(size) =>
            {
                write!(f, "random-resized-crop:{size}")
            }
            Augment::RandomResizedCrop { size, scale, ratio } => {
                write!(
                    f,
                    "random-resized-crop:{size} (scale {scale:?}, ratio {ratio:?})"
                )
            }
        }
    }
}

impl std::str::FromStr for Augment {
    type Err = String;

    /// Parses `none`, `crop-flip:PAD`, `random-resized-crop:SIZE` or `center-crop:SIZE`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, arg) = s.split_once(':').unwrap_or((s, ""));
        let number = |what: &str| {
            arg.parse::<u32>().map_err(|_| {
                format!("augmentation {s:?}: expected {name}:{what} with a whole number")
            })
        };
        match name {
            "none" if arg.is_empty() => Ok(Augment::None),
            "crop-flip" => Ok(Augment::CropFlip { pad: number("PAD")? }),
            "random-resized-crop" => Ok(Augment::random_resized_crop(number("SIZE")?)),
            "center-crop" => Ok(Augment::CenterCrop { size: number("SIZE")? }),
            _ => Err(format!(
                "unknown augmentation {s:?}: use none, crop-flip:PAD, random-resized-crop:SIZE or center-crop:SIZE"
            )),
        }
    }
}

/// Per-channel affine map from a u8 pixel to the normalised value: `p * scale + bias`,
/// with `scale = 1 / (255 · std)` and `bias = −mean / std` (mean, std on the [0, 1] scale).
#[derive(Clone, Debug, PartialEq)]
pub struct Affine {
    /// Multiplier per channel.
    pub scale: Vec<f32>,
    /// Offset per channel (also the value of a zero padding pixel).
    pub bias: Vec<f32>,
}

impl Affine {
    /// From mean and standard deviation per channel, both on the [0, 1] scale.
    pub fn from_mean_std(mean: &[f32], std: &[f32]) -> Self {
        Affine {
            scale: std.iter().map(|s| 1.0 / (255.0 * s)).collect(),
            bias: mean.iter().zip(std).map(|(m, s)| -m / s).collect(),
        }
    }
}

/// Geometry of the sample being processed.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Channels.
    pub c: usize,
    /// Stored height.
    pub h: usize,
    /// Stored width.
    pub w: usize,
}

/// Augments and normalises one sample `src` (C×H×W u8) into `out` (C×H'×W' f32).
pub fn apply(
    aug: &Augment,
    src: &[u8],
    shape: Shape,
    affine: &Affine,
    rng: &mut ChaCha8Rng,
    out: &mut [f32],
) {
    match *aug {
        Augment::None => crop_flip(src, shape, affine, (0, 0), 0, false, out),
        Augment::CropFlip { pad } => {
            let pad = pad as usize;
            let oy = rng.random_range(0..=2 * pad);
            let ox = rng.random_range(0..=2 * pad);
            let flip = rng.random_bool(0.5);
            crop_flip(src, shape, affine, (oy, ox), pad, flip, out)
        }
        Augment::CenterCrop { size } => {
            let size = size as usize;
            let (oy, ox) = ((shape.h - size) / 2, (shape.w - size) / 2);
            window(src, shape, affine, (oy, ox), size, out)
        }
        Augment::RandomResizedCrop { size, scale, ratio } => {
            let (bx, flip) = draw_resized_crop(shape, scale, ratio, rng);
            resize_bilinear(src, shape, affine, bx, size as usize, flip, out)
        }
    }
}

/// One axis of a resampling: per output index, the two source indices and the second's
/// weight.
pub type Taps = Vec<(usize, usize, f32)>;

/// The (row, column) taps that resample one sample as [`apply`] does — drawing from `rng`
/// exactly as `apply` draws, flip included — for augmentations that are pure resamplings
/// (`None`, `CenterCrop`: weight 0; `RandomResizedCrop`: bilinear); `None` for crop-flip,
/// whose zero padding is not one.
pub fn taps(aug: &Augment, shape: Shape, rng: &mut ChaCha8Rng) -> Option<(Taps, Taps)> {
    let exact = |start: usize, len: usize| (start..start + len).map(|i| (i, i, 0.0)).collect();
    match *aug {
        Augment::None => Some((exact(0, shape.h), exact(0, shape.w))),
        Augment::CenterCrop { size } => {
            let size = size as usize;
            let (oy, ox) = ((shape.h - size) / 2, (shape.w - size) / 2);
            Some((exact(oy, size), exact(ox, size)))
        }
        Augment::RandomResizedCrop { size, scale, ratio } => {
            let (bx, flip) = draw_resized_crop(shape, scale, ratio, rng);
            Some(box_taps(shape, bx, size as usize, flip))
        }
        Augment::CropFlip { .. } => None,
    }
}

/// Pads by `pad` (zero pixels), crops the stored size at (`oy`, `ox`) of the padded image,
/// optionally flips horizontally, normalises.
fn crop_flip(
    src: &[u8],
    Shape { c, h, w }: Shape,
    affine: &Affine,
    (oy, ox): (usize, usize),
    pad: usize,
    flip: bool,
    out: &mut [f32],
) {
    for ch in 0..c {
        let (scale, bias) = (affine.scale[ch], affine.bias[ch]);
        let plane = &src[ch * h * w..(ch + 1) * h * w];
        for (y, row_out) in out[ch * h * w..(ch + 1) * h * w]
            .chunks_exact_mut(w)
            .enumerate()
        {
            let sy = (y + oy).wrapping_sub(pad);
            if sy >= h {
                row_out.fill(bias);
                continue;
            }
            let row = &plane[sy * w..(sy + 1) * w];
            // Output column x reads padded column x + ox, i.e. source column x + ox − pad;
            // valid for x in [pad − ox, w + pad − ox) ∩ [0, w).
            let lo = pad.saturating_sub(ox);
            let hi = (w + pad).saturating_sub(ox).min(w);
            let (src_lo, n) = (lo + ox - pad, hi.saturating_sub(lo));
            let (head, rest) = row_out.split_at_mut(lo.min(w));
            head.fill(bias);
            let (mid, tail) = rest.split_at_mut(n);
            tail.fill(bias);
            for (o, &p) in mid.iter_mut().zip(&row[src_lo..src_lo + n]) {
                *o = f32::from(p) * scale + bias;
            }
            if flip {
                row_out.reverse();
            }
        }
    }
}

/// The `size`×`size` window at (`oy`, `ox`), normalised.
fn window(
    src: &[u8],
    Shape { c, h, w }: Shape,
    affine: &Affine,
    (oy, ox): (usize, usize),
    size: usize,
    out: &mut [f32],
) {
    for ch in 0..c {
        let (scale, bias) = (affine.scale[ch], affine.bias[ch]);
        let plane = &src[ch * h * w..(ch + 1) * h * w];
        for (y, row_out) in out[ch * size * size..(ch + 1) * size * size]
            .chunks_exact_mut(size)
            .enumerate()
        {
            let row = &plane[(oy + y) * w + ox..(oy + y) * w + ox + size];
            for (o, &p) in row_out.iter_mut().zip(row) {
                *o = f32::from(p) * scale + bias;
            }
        }
    }
}

/// torchvision's `RandomResizedCrop.get_params`: up to ten tries at a random area and
/// log-uniform aspect ratio, then a central crop clamped to the ratio range.
/// Returns (top, left, height, width).
fn resized_crop_box(
    h: usize,
    w: usize,
    scale: (f32, f32),
    ratio: (f32, f32),
    rng: &mut ChaCha8Rng,
) -> (usize, usize, usize, usize) {
    let area = (h * w) as f32;
    let (log_lo, log_hi) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * rng.random_range(scale.0..=scale.1);
        let aspect = rng.random_range(log_lo..=log_hi).exp();
        let cw = (target * aspect).sqrt().round() as usize;
        let ch = (target / aspect).sqrt().round() as usize;
        if cw > 0 && ch > 0 && cw <= w && ch <= h {
            let top = rng.random_range(0..=h - ch);
            let left = rng.random_range(0..=w - cw);
            return (top, left, ch, cw);
        }
    }
    let in_ratio = w as f32 / h as f32;
    let (ch, cw) = if in_ratio < ratio.0 {
        (((w as f32 / ratio.0).round() as usize).clamp(1, h), w)
    } else if in_ratio > ratio.1 {
        (h, ((h as f32 * ratio.1).round() as usize).clamp(1, w))
    } else {
        (h, w)
    };
    ((h - ch) / 2, (w - cw) / 2, ch, cw)
}

/// One axis of a bilinear resize (half-pixel centres, like `align_corners=False`): for each
/// output index, the two source indices and the weight of the second.
fn bilinear_axis(
    start: usize,
    len: usize,
    out_len: usize,
    limit: usize,
) -> Vec<(usize, usize, f32)> {
    let step = len as f32 / out_len as f32;
    (0..out_len)
        .map(|o| {
            let s = ((o as f32 + 0.5) * step - 0.5).max(0.0);
            let i0 = (s.floor() as usize).min(len - 1);
            let i1 = (i0 + 1).min(len - 1);
            (start + i0, (start + i1).min(limit - 1), s - i0 as f32)
        })
        .collect()
}

/// One random-resized-crop's draws, in their order: the box (top, left, height, width), then
/// the flip. The CPU path ([`apply`]) and the device path ([`taps`]) both draw through this.
fn draw_resized_crop(
    shape: Shape,
    scale: (f32, f32),
    ratio: (f32, f32),
    rng: &mut ChaCha8Rng,
) -> ((usize, usize, usize, usize), bool) {
    let bx = resized_crop_box(shape.h, shape.w, scale, ratio, rng);
    (bx, rng.random_bool(0.5))
}

/// The row and column taps resizing the box (top, left, height, width) to `size`×`size`,
/// the columns reversed for a horizontal flip.
fn box_taps(
    shape: Shape,
    (top, left, bh, bw): (usize, usize, usize, usize),
    size: usize,
    flip: bool,
) -> (Taps, Taps) {
    let mut cols = bilinear_axis(left, bw, size, shape.w);
    if flip {
        cols.reverse();
    }
    (bilinear_axis(top, bh, size, shape.h), cols)
}

/// Resizes the box (top, left, height, width) of `src` to `size`×`size`, bilinear, with an
/// optional horizontal flip, normalised. Separable: each source row an output row needs is
/// first resampled horizontally (kept for the next output row, which mostly shares it),
/// then two such rows are blended per output row — a contiguous loop the compiler
/// vectorises. The arithmetic is the direct formula's, in the same order.
fn resize_bilinear(
    src: &[u8],
    shape: Shape,
    affine: &Affine,
    bx: (usize, usize, usize, usize),
    size: usize,
    flip: bool,
    out: &mut [f32],
) {
    let (rows, cols) = box_taps(shape, bx, size, flip);
    let Shape { c, h, w } = shape;
    let mut cache = RowCache::new(size);
    for ch in 0..c {
        let (scale, bias) = (affine.scale[ch], affine.bias[ch]);
        let plane = &src[ch * h * w..(ch + 1) * h * w];
        cache.clear();
        for (row_out, &(y0, y1, wy)) in out[ch * size * size..(ch + 1) * size * size]
            .chunks_exact_mut(size)
            .zip(&rows)
        {
            let (a, b) = cache.pair(y0, y1, |y, buf| {
                horizontal(&plane[y * w..(y + 1) * w], &cols, buf)
            });
            for ((o, &t), &u) in row_out.iter_mut().zip(a).zip(b) {
                *o = (t + (u - t) * wy) * scale + bias;
            }
        }
    }
}

/// One source row resampled at the columns `cols` (x0, x1, weight of x1).
fn horizontal(row: &[u8], cols: &[(usize, usize, f32)], out: &mut [f32]) {
    for (o, &(x0, x1, wx)) in out.iter_mut().zip(cols) {
        let p0 = f32::from(row[x0]);
        *o = p0 + (f32::from(row[x1]) - p0) * wx;
    }
}

/// The last two horizontally resampled source rows, by source row index.
struct RowCache {
    tags: [usize; 2],
    bufs: [Vec<f32>; 2],
}

impl RowCache {
    fn new(len: usize) -> Self {
        RowCache {
            tags: [usize::MAX; 2],
            bufs: [vec![0.0; len], vec![0.0; len]],
        }
    }

    fn clear(&mut self) {
        self.tags = [usize::MAX; 2];
    }

    /// The resampled rows `y0` and `y1` (`fill` computes a missing one), reusing cached ones.
    fn pair(
        &mut self,
        y0: usize,
        y1: usize,
        mut fill: impl FnMut(usize, &mut [f32]),
    ) -> (&[f32], &[f32]) {
        // Slot for y0: where it is, else the slot not holding y1.
        let s0 = match self.tags {
            [t, _] if t == y0 => 0,
            [_, t] if t == y0 => 1,
            [t, _] if t == y1 => 1,
            _ => 0,
        };
        if self.tags[s0] != y0 {
            fill(y0, &mut self.bufs[s0]);
            self.tags[s0] = y0;
        }
        let s1 = if y1 == y0 { s0 } else { 1 - s0 };
        if self.tags[s1] != y1 {
            fill(y1, &mut self.bufs[s1]);
            self.tags[s1] = y1;
        }
        (&self.bufs[s0], &self.bufs[s1])
    }
}

#[cfg(test)]
mod tests;
