//! Augmentation on the training device (loader output `Device`): the workers ship each
//! sample's stored u8 image and its bilinear tables — the same tables, from the same seeded
//! draws, that the CPU path resamples with — and libtorch resamples, flips, casts and
//! normalises the whole batch on the device in a few batched gathers, in the CPU path's
//! arithmetic order. The CPU and device paths compute the same function; the tests compare
//! them on CPU tensors.

use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind, Tensor};

use super::augment::{self, Augment, Taps};
use super::host_memory::{host_slice, host_tensor};
use super::DataError;

/// Whether `aug` can run on the device (crop-flip's zero padding stays on the host).
pub fn supports(aug: &Augment) -> bool {
    !matches!(aug, Augment::CropFlip { .. })
}

/// A batch's stored images and resize tables, on the host (pinned), for the device.
#[derive(Debug)]
pub struct RawImages {
    /// N×C×H×W u8, as stored.
    pixels: Tensor,
    /// Per sample and output row: the two source rows (N×H'), and the second's weight.
    rows: (Tensor, Tensor, Tensor),
    /// Per sample and output column: the two source columns (N×W'), and the second's weight.
    cols: (Tensor, Tensor, Tensor),
    /// Per channel: the normalisation's multiplier and offset.
    affine: (Vec<f32>, Vec<f32>),
}

/// Host tensors of `n`×`len` for one axis's taps: (first, second, weight).
fn axis_tensors(n: usize, len: usize, pinned: bool) -> Result<(Tensor, Tensor, Tensor), DataError> {
    let (dims, view) = ([n, len, 1, 1], [n as i64, len as i64]);
    Ok((
        host_tensor(dims, Kind::Int64, pinned)?.f_view(view)?,
        host_tensor(dims, Kind::Int64, pinned)?.f_view(view)?,
        host_tensor(dims, Kind::Float, pinned)?.f_view(view)?,
    ))
}

/// Writes sample `k`'s taps into the axis tensors.
///
/// # Safety
/// The tensors are fresh, contiguous, of `n`×`taps.len()` and held only by this worker.
unsafe fn write_taps(t: &mut (Tensor, Tensor, Tensor), k: usize, taps: &Taps) {
    let len = taps.len();
    let (a, b, w) = (
        host_slice::<i64>(&mut t.0),
        host_slice::<i64>(&mut t.1),
        host_slice::<f32>(&mut t.2),
    );
    for (j, &(i0, i1, wt)) in taps.iter().enumerate() {
        a[k * len + j] = i0 as i64;
        b[k * len + j] = i1 as i64;
        w[k * len + j] = wt;
    }
}

/// What [`RawImages::gather`] reads: the pack, the augmentation, the stored and output
/// shapes, the normalisation and whether the batches go to page-locked memory.
#[derive(Clone, Copy)]
pub(super) struct Source<'a> {
    pub(super) pack: &'a super::Pack,
    pub(super) augment: &'a Augment,
    pub(super) shape: super::augment::Shape,
    pub(super) out_hw: (usize, usize),
    pub(super) affine: &'a super::augment::Affine,
    pub(super) pinned: bool,
}

impl RawImages {
    /// The samples `mine` of `plan`'s pack with their tables; `rng(i)` is sample i's
    /// generator (drawn exactly as the CPU path draws).
    pub(super) fn gather(
        from: Source<'_>,
        mine: &[usize],
        rng: impl Fn(usize) -> ChaCha8Rng,
    ) -> Result<Self, DataError> {
        let (n, s) = (mine.len(), from.shape);
        let (oh, ow) = from.out_hw;
        let pinned = from.pinned;
        let mut pixels = host_tensor([n, s.c, s.h, s.w], Kind::Uint8, pinned)?;
        let (mut rows, mut cols) = (axis_tensors(n, oh, pinned)?, axis_tensors(n, ow, pinned)?);
        // SAFETY: fresh contiguous tensors of the sizes written, held only here.
        let bytes = unsafe { host_slice::<u8>(&mut pixels) };
        let per = s.c * s.h * s.w;
        for (k, &i) in mine.iter().enumerate() {
            bytes[k * per..(k + 1) * per].copy_from_slice(from.pack.image(i));
            let (r, c) = augment::taps(from.augment, s, &mut rng(i))
                .expect("the loader ships raw images only for augmentations with taps");
            // SAFETY: as above; r and c have oh and ow taps.
            unsafe {
                write_taps(&mut rows, k, &r);
                write_taps(&mut cols, k, &c);
            }
        }
        let affine = (from.affine.scale.clone(), from.affine.bias.clone());
        Ok(RawImages {
            pixels,
            rows,
            cols,
            affine,
        })
    }

    /// The batch augmented and normalised on `device`: N×C×H'×W' float32.
    pub fn augment(&self, device: Device) -> Result<Tensor, DataError> {
        let to = |t: &Tensor| t.f_to_device_(device, t.kind(), true, false);
        let img = to(&self.pixels)?.f_to_kind(Kind::Float)?;
        let [n, c, h, _] = <[i64; 4]>::try_from(img.size()).expect("a 4-d batch");
        let (oh, ow) = (self.rows.0.size()[1], self.cols.0.size()[1]);
        // Horizontal: p0 + (p1 − p0)·wx at every stored row.
        let col = |t: &Tensor| -> Result<Tensor, tch::TchError> {
            to(t)?.f_view([n, 1, 1, ow])?.f_expand([n, c, h, ow], false)
        };
        let (p0, p1) = (
            img.f_gather(3, &col(&self.cols.0)?, false)?,
            img.f_gather(3, &col(&self.cols.1)?, false)?,
        );
        let wx = to(&self.cols.2)?.f_view([n, 1, 1, ow])?;
        let across = p0.f_add(&p1.f_sub(&p0)?.f_mul(&wx)?)?;
        // Vertical: t + (u − t)·wy, then the affine map per channel.
        let row = |t: &Tensor| -> Result<Tensor, tch::TchError> {
            to(t)?
                .f_view([n, 1, oh, 1])?
                .f_expand([n, c, oh, ow], false)
        };
        let (t, u) = (
            across.f_gather(2, &row(&self.rows.0)?, false)?,
            across.f_gather(2, &row(&self.rows.1)?, false)?,
        );
        let wy = to(&self.rows.2)?.f_view([n, 1, oh, 1])?;
        let channel = |v: &[f32]| -> Result<Tensor, tch::TchError> {
            Tensor::f_from_slice(v)?
                .f_view([1, c, 1, 1])?
                .f_to_device(device)
        };
        let blended = t.f_add(&u.f_sub(&t)?.f_mul(&wy)?)?;
        Ok(blended
            .f_mul(&channel(&self.affine.0)?)?
            .f_add(&channel(&self.affine.1)?)?)
    }
}
