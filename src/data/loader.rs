//! The epoch loader: a seeded shuffle of a packed split, cut into global batches of which
//! each rank of a group takes its contiguous share, augmented and normalised by worker
//! threads into a bounded prefetch queue, delivered in batch order.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use aiperf_data_prep::Pack;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::seeds::mix;

use super::augment::{self, Affine, Augment, Shape};
use super::host_memory::{host_slice, host_tensor};
use super::{device_aug, DataError};

/// How a rank loads one split.
#[derive(Clone, Debug, PartialEq)]
pub struct LoaderConfig {
    /// Samples per global batch, summed over the group's ranks.
    pub global_batch: usize,
    /// This rank's position in its group, `0..group_size`.
    pub rank: usize,
    /// Ranks in the group; each takes a contiguous share of every global batch.
    pub group_size: usize,
    /// Seed of the shuffle and of the augmentation draws.
    pub seed: u64,
    /// Shuffle every epoch (training) or keep file order (validation).
    pub shuffle: bool,
    /// Drop the last, partial global batch.
    pub drop_last: bool,
    /// Per-sample augmentation.
    pub augment: Augment,
    /// Per-channel mean on the [0, 1] scale; `None` = the pack's own statistics.
    pub mean: Option<Vec<f32>>,
    /// Per-channel standard deviation on the [0, 1] scale; `None` = the pack's own.
    pub std: Option<Vec<f32>>,
    /// Worker threads.
    pub workers: usize,
    /// Batches each worker may hold ready ahead of the consumer.
    pub prefetch: usize,
    /// Samples per epoch: the first `limit` of each epoch's order — a fresh random subset
    /// every epoch when shuffling, a fixed one otherwise. `None` = the whole split.
    pub limit: Option<usize>,
    /// What the workers hand over: finished images on the host, or the stored images and
    /// resize tables for augmentation on the device.
    pub output: Output,
    /// Host images written in channels-last order (N·H·W·C in memory, handed over as an
    /// N·C·H·W view of it): what a channels-last model reads, without a copy.
    pub channels_last: bool,
}

/// Where the loader's augmentation runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    /// Augmented and normalised by the workers into host tensors (for training on the CPU).
    #[default]
    Host,
    /// As `Host`, in page-locked memory, copied asynchronously to a CUDA device.
    Pinned,
    /// The workers ship the stored u8 images (pinned) with each sample's bilinear tables;
    /// [`Batch::to_tensors`] resamples, flips, casts and normalises on the device. For
    /// `none`, `center-crop` and `random-resized-crop` (others fall back to `Pinned`).
    Device,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig {
            global_batch: 128,
            rank: 0,
            group_size: 1,
            seed: 0,
            shuffle: true,
            drop_last: false,
            augment: Augment::None,
            mean: None,
            std: None,
            workers: 2,
            prefetch: 2,
            limit: None,
            output: Output::Host,
            channels_last: false,
        }
    }
}

/// One rank's share of one global batch, ready for the model.
#[derive(Debug)]
pub struct Batch {
    /// The epoch it belongs to.
    pub epoch: u64,
    /// Its position in the epoch.
    pub index: usize,
    /// Samples in the whole global batch (all ranks), for weighting gradients and metrics.
    pub global_size: usize,
    /// The dataset indices of this rank's samples.
    pub indices: Vec<usize>,
    /// The images as the workers made them.
    pub images: Images,
    /// Class labels, N.
    pub labels: Vec<i64>,
    /// (N, C, H, W) of the images the model gets.
    pub shape: [usize; 4],
}

/// A batch's images.
#[derive(Debug)]
pub enum Images {
    /// N×C×H×W float32, augmented and normalised, in a host tensor's memory.
    Ready(tch::Tensor),
    /// The stored u8 images and what the device does with them ([`super::device_aug`]).
    Raw(super::device_aug::RawImages),
}

impl Batch {
    /// Samples in this rank's share (may be 0 in a last partial batch smaller than the group).
    pub fn len(&self) -> usize {
        self.shape[0]
    }

    /// Whether this rank's share is empty.
    pub fn is_empty(&self) -> bool {
        self.shape[0] == 0
    }
}

/// The `rank`-th of `parts` contiguous, balanced shares of `0..n` (sizes differ by ≤ 1).
pub fn shard_range(n: usize, parts: usize, rank: usize) -> std::ops::Range<usize> {
    (n * rank / parts)..(n * (rank + 1) / parts)
}

/// The sample order of `epoch`: a permutation of `0..n` that depends only on (seed, epoch),
/// so every rank of a group computes the same one.
pub fn epoch_order(n: usize, seed: u64, epoch: u64, shuffle: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if shuffle {
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(mix(seed ^ mix(epoch))));
    }
    order
}

/// The augmentation generator of one sample in one epoch.
fn sample_rng(seed: u64, epoch: u64, sample: usize) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(mix(mix(seed ^ 0x5eed)
        ^ mix(epoch.wrapping_add(1))
        ^ (sample as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)))
}

/// Everything a worker needs, shared read-only.
pub(super) struct Plan {
    pub(super) pack: Arc<Pack>,
    pub(super) cfg: LoaderConfig,
    pub(super) affine: Affine,
    pub(super) shape: Shape,
    pub(super) out_hw: (usize, usize),
    /// Whether batches go to page-locked memory: the output is for CUDA and there is a
    /// CUDA device to copy to (the tests run the other outputs on CPU).
    pub(super) pinned: bool,
}

impl Plan {
    fn make_batch(&self, epoch: u64, index: usize, global: &[usize]) -> Result<Batch, DataError> {
        let mine = &global[shard_range(global.len(), self.cfg.group_size, self.cfg.rank)];
        let (oh, ow) = self.out_hw;
        let labels = mine
            .iter()
            .map(|&i| i64::from(self.pack.label(i)))
            .collect();
        let rng = |i: usize| sample_rng(self.cfg.seed, epoch, i);
        let images = match self.cfg.output {
            Output::Device if device_aug::supports(&self.cfg.augment) => {
                let from = device_aug::Source {
                    pack: &self.pack,
                    augment: &self.cfg.augment,
                    shape: self.shape,
                    out_hw: self.out_hw,
                    affine: &self.affine,
                    pinned: self.pinned,
                };
                Images::Raw(device_aug::RawImages::gather(from, mine, rng)?)
            }
            _ => Images::Ready(self.host_images(mine, &rng)?),
        };
        Ok(Batch {
            epoch,
            index,
            global_size: global.len(),
            indices: mine.to_vec(),
            images,
            labels,
            shape: [mine.len(), self.shape.c, oh, ow],
        })
    }
}

impl Plan {
    /// The augmented, normalised images of `samples` in a host tensor (N·C·H·W, or its
    /// channels-last view when asked for and there are several channels: one channel is
    /// both orders at once).
    fn host_images(
        &self,
        samples: &[usize],
        rng: &dyn Fn(usize) -> ChaCha8Rng,
    ) -> Result<tch::Tensor, DataError> {
        let ((oh, ow), c) = (self.out_hw, self.shape.c);
        let interleave = self.cfg.channels_last && c > 1;
        let dims = if interleave {
            [samples.len(), oh, ow, c]
        } else {
            [samples.len(), c, oh, ow]
        };
        let mut t = host_tensor(dims, tch::Kind::Float, self.pinned)?;
        // SAFETY: a fresh contiguous f32 tensor that only this worker holds.
        let out = unsafe { host_slice::<f32>(&mut t) };
        let per = c * oh * ow;
        // One sample's planes, interleaved into its pixels' channels.
        let mut planes = vec![0f32; if interleave { per } else { 0 }];
        for (&i, out) in samples.iter().zip(out.chunks_exact_mut(per.max(1))) {
            let (aug, src) = (&self.cfg.augment, self.pack.image(i));
            if !interleave {
                augment::apply(aug, src, self.shape, &self.affine, &mut rng(i), out);
                continue;
            }
            augment::apply(aug, src, self.shape, &self.affine, &mut rng(i), &mut planes);
            for (ch, plane) in planes.chunks_exact(oh * ow).enumerate() {
                for (px, &v) in plane.iter().enumerate() {
                    out[px * c + ch] = v;
                }
            }
        }
        Ok(if interleave {
            t.f_permute([0, 3, 1, 2])?
        } else {
            t
        })
    }
}

/// Loads epochs of one packed split for one rank.
pub struct Loader {
    plan: Arc<Plan>,
}

impl Loader {
    /// Checks the configuration against the pack (no I/O beyond the header).
    pub fn new(pack: Arc<Pack>, cfg: LoaderConfig) -> Result<Self, DataError> {
        let h = pack.header();
        let bad = |msg: String| Err(DataError::Config(msg));
        if cfg.group_size == 0 || cfg.rank >= cfg.group_size {
            return bad(format!(
                "rank {} is not in a group of {} ranks",
                cfg.rank, cfg.group_size
            ));
        }
        if cfg.global_batch < cfg.group_size {
            return bad(format!(
                "global batch {} is smaller than the group ({} ranks): every rank needs at least one sample",
                cfg.global_batch, cfg.group_size
            ));
        }
        if cfg.limit == Some(0) {
            return bad("the loader's sample limit must be at least 1".into());
        }
        if cfg.workers == 0 || cfg.prefetch == 0 {
            return bad("loader workers and prefetch depth must be at least 1".into());
        }
        let (c, sh, sw) = (h.channels as usize, h.height as usize, h.width as usize);
        if let Err(e) = cfg.augment.check_fits(h.height, h.width) {
            return bad(format!(
                "{e} of {} (choose another augmentation for this dataset)",
                pack.path().display()
            ));
        }
        let mean = cfg
            .mean
            .clone()
            .unwrap_or_else(|| h.channel_mean.iter().map(|&m| m as f32).collect());
        let std = cfg
            .std
            .clone()
            .unwrap_or_else(|| h.channel_std.iter().map(|&s| s as f32).collect());
        if mean.len() != c || std.len() != c {
            return bad(format!("normalisation needs {c} means and standard deviations (the images have {c} channels), got {} and {}", mean.len(), std.len()));
        }
        if let Some(s) = std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return bad(format!("standard deviation {s} is not positive; constant images cannot be normalised: set the loader's std explicitly"));
        }
        let (oh, ow) = cfg.augment.output_hw(h.height, h.width);
        let plan = Plan {
            affine: Affine::from_mean_std(&mean, &std),
            shape: Shape { c, h: sh, w: sw },
            out_hw: (oh as usize, ow as usize),
            pinned: cfg.output != Output::Host && tch::Cuda::is_available(),
            pack,
            cfg,
        };
        Ok(Loader {
            plan: Arc::new(plan),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &LoaderConfig {
        &self.plan.cfg
    }

    /// Global batches per epoch (the same on every rank of the group).
    pub fn batches_per_epoch(&self) -> usize {
        let (n, b) = (self.epoch_len(), self.plan.cfg.global_batch);
        if self.plan.cfg.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }
    }

    /// Samples one epoch covers over the whole group.
    pub fn samples_per_epoch(&self) -> usize {
        if self.plan.cfg.drop_last {
            self.batches_per_epoch() * self.plan.cfg.global_batch
        } else {
            self.epoch_len()
        }
    }

    /// Samples drawn per epoch before batching: the split, or its first `limit`.
    fn epoch_len(&self) -> usize {
        let n = self.plan.pack.len();
        self.plan.cfg.limit.map_or(n, |l| l.min(n))
    }

    /// Output sample shape (C, H, W).
    pub fn sample_shape(&self) -> [usize; 3] {
        [self.plan.shape.c, self.plan.out_hw.0, self.plan.out_hw.1]
    }

    /// Starts `epoch`: workers begin filling the queue at once. Dropping the iterator early
    /// stops them.
    pub fn epoch(&self, epoch: u64) -> EpochIter {
        let cfg = &self.plan.cfg;
        let mut order = epoch_order(self.plan.pack.len(), cfg.seed, epoch, cfg.shuffle);
        order.truncate(self.epoch_len());
        let order = Arc::new(order);
        let total = self.batches_per_epoch();
        let workers = cfg.workers.min(total.max(1));
        let mut receivers = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for w in 0..workers {
            let (tx, rx) = sync_channel(cfg.prefetch);
            let (plan, order) = (Arc::clone(&self.plan), Arc::clone(&order));
            let handle = std::thread::Builder::new()
                .name(format!("loader-{w}"))
                .spawn(move || {
                    let b = plan.cfg.global_batch;
                    for index in (w..total).step_by(workers) {
                        let global = &order[index * b..((index + 1) * b).min(order.len())];
                        let batch = plan.make_batch(epoch, index, global);
                        let failed = batch.is_err();
                        if tx.send(batch).is_err() || failed {
                            return; // the consumer went away, or was told why this stops
                        }
                    }
                })
                .expect("spawning a loader thread");
            receivers.push(rx);
            handles.push(handle);
        }
        EpochIter {
            receivers,
            handles,
            next: 0,
            total,
        }
    }
}

/// The batches of one epoch, in order.
pub struct EpochIter {
    receivers: Vec<Receiver<Result<Batch, DataError>>>,
    handles: Vec<JoinHandle<()>>,
    next: usize,
    total: usize,
}

impl Iterator for EpochIter {
    type Item = Result<Batch, DataError>;

    fn next(&mut self) -> Option<Result<Batch, DataError>> {
        if self.next >= self.total {
            return None;
        }
        let rx = &self.receivers[self.next % self.receivers.len()];
        self.next += 1;
        match rx.recv() {
            Ok(batch) => Some(batch),
            // A worker hangs up early only after sending its error, or by panicking.
            Err(_) => Some(Err(DataError::Config(
                "a data loader thread died; see its panic message above".into(),
            ))),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.total - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for EpochIter {}

impl Drop for EpochIter {
    fn drop(&mut self) {
        self.receivers.clear(); // unblocks workers waiting to send
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}
