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
use super::DataError;

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
        }
    }
}

/// One rank's share of one global batch, ready for the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// The epoch it belongs to.
    pub epoch: u64,
    /// Its position in the epoch.
    pub index: usize,
    /// Samples in the whole global batch (all ranks), for weighting gradients and metrics.
    pub global_size: usize,
    /// The dataset indices of this rank's samples.
    pub indices: Vec<usize>,
    /// Images, N×C×H×W, normalised float32.
    pub images: Vec<f32>,
    /// Class labels, N.
    pub labels: Vec<i64>,
    /// (N, C, H, W).
    pub shape: [usize; 4],
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
struct Plan {
    pack: Arc<Pack>,
    cfg: LoaderConfig,
    affine: Affine,
    shape: Shape,
    out_hw: (usize, usize),
}

impl Plan {
    fn make_batch(&self, epoch: u64, index: usize, global: &[usize]) -> Batch {
        let mine = &global[shard_range(global.len(), self.cfg.group_size, self.cfg.rank)];
        let (oh, ow) = self.out_hw;
        let per = self.shape.c * oh * ow;
        let mut images = vec![0f32; mine.len() * per];
        let mut labels = Vec::with_capacity(mine.len());
        for (&i, out) in mine.iter().zip(images.chunks_exact_mut(per)) {
            let mut rng = sample_rng(self.cfg.seed, epoch, i);
            augment::apply(
                &self.cfg.augment,
                self.pack.image(i),
                self.shape,
                &self.affine,
                &mut rng,
                out,
            );
            labels.push(i64::from(self.pack.label(i)));
        }
        Batch {
            epoch,
            index,
            global_size: global.len(),
            indices: mine.to_vec(),
            images,
            labels,
            shape: [mine.len(), self.shape.c, oh, ow],
        }
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
                        if tx.send(plan.make_batch(epoch, index, global)).is_err() {
                            return; // the consumer went away
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
    receivers: Vec<Receiver<Batch>>,
    handles: Vec<JoinHandle<()>>,
    next: usize,
    total: usize,
}

impl Iterator for EpochIter {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        if self.next >= self.total {
            return None;
        }
        let rx = &self.receivers[self.next % self.receivers.len()];
        self.next += 1;
        match rx.recv() {
            Ok(batch) => Some(batch),
            // A worker only hangs up early by panicking; surface that rather than stop short.
            Err(_) => panic!("a data loader thread died; see its panic message above"),
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
