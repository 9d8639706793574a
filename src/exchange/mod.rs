//! The gradient exchange: how a replica group sums its ranks' gradients (and batch-norm
//! statistics), each weighted by its share of the global batch, so that every rank applies
//! the same update and holds bit-identical parameters. One way in: an [`Exchange`], built
//! once per trial (or sweep) from one [`ExchangeConfig`] — its method resolved once per
//! command by a start-up probe ([`resolve_auto`]), its overlap with backward settled once
//! from MPI's thread level ([`ExchangeConfig::within`]), its `Reducer` (flat or node-aware)
//! built with its communicators — and given buckets to sum (`Exchange::sum`, the one summing
//! operation): the trainers and `dp-check` through [`Gradients`], the emulated trainer,
//! `comm-bench` and the probe over host memory ([`Exchange::sum_host`]).
//!
//! Each file owns one thing: `config` the settings and the flags, `buckets` the bucket plan,
//! `sum` the one summing loop and its communication thread, `reducer` the method,
//! `node_aware` the node-aware reduction, `calls` the raw MPI calls, `staging` where the
//! buffer lies, `hooks` the autograd hooks, `gradients` a trial's gradients, held either
//! as views of the buckets (`views`) or copied through a buffer (`copied`), `choose` the
//! `auto` probe.

mod buckets;
mod calls;
mod choose;
mod config;
mod copied;
mod gradients;
mod hooks;
mod node_aware;
mod reducer;
mod staging;
mod sum;
mod views;

use std::ops::Range;

pub use calls::{
    allreduce, check_collectives, cuda_aware, cuda_aware_compiled, CudaAware, RawComm,
};
pub use choose::{resolve_auto, Choice, RunChoice};
pub use config::{
    ExchangeArgs, ExchangeConfig, ExchangeMethod, FlagError, BUCKET_BYTES, DEFAULT_BUCKET_BYTES,
    DEFAULT_FIRST_BUCKET_BYTES,
};
pub use gradients::Gradients;
use reducer::Reducer;
pub use staging::Staging;
use sum::Target;
pub use sum::{Backward, ExchangeTimes, Progress, Summed, SyncStats};

/// Why an exchange could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// libtorch refused an operation (a copy into or out of the buckets).
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    /// A variable has no gradient yet.
    #[error("trainable variable {0} has no gradient: run backward before synchronising")]
    NoGradient(usize),
    /// The settings do not fit the device or the MPI.
    #[error("{0}")]
    Config(String),
    /// The exchanged values do not fit MPI's i32 counts.
    #[error("{0} gradient values exceed what one MPI message can carry (2^31 − 1)")]
    TooLarge(usize),
}

/// A group's exchange: its resolved configuration (whether it overlaps with backward
/// included) and its reducer; valid while the group's communicator `'c` lives.
pub struct Exchange<'c> {
    cfg: ExchangeConfig,
    reducer: Reducer<'c>,
    one_rank: bool,
}

impl<'c> Exchange<'c> {
    /// The exchange `cfg` asks for over `comm`, its reducer built (collective over `comm`:
    /// every rank of the group calls it at the same point). `cfg`'s method is resolved:
    /// `auto` is settled once per command by [`resolve_auto`], and an exchange asked to be
    /// `auto` is refused. The overlap is `cfg`'s, which the command settled once with MPI's
    /// thread level ([`ExchangeConfig::within`]).
    pub fn new<C: RawComm>(
        comm: &'c C,
        cfg: &ExchangeConfig,
    ) -> Result<Exchange<'c>, ExchangeError> {
        let reducer = Reducer::new(comm, cfg.method).ok_or_else(|| {
            ExchangeError::Config(
                "exchange auto reached a group unresolved: resolve_auto settles it once per run, before any exchange is built".into(),
            )
        })?;
        Ok(Exchange {
            reducer,
            one_rank: comm.size() == 1,
            cfg: *cfg,
        })
    }

    /// The configuration as it runs (`auto` resolved), as the records hold it.
    pub fn config(&self) -> &ExchangeConfig {
        &self.cfg
    }

    /// Whether the buckets are reduced during backward ([`Progress::During`]).
    pub fn overlaps(&self) -> bool {
        self.cfg.overlap
    }

    /// Whether the group is this rank alone (the sums cross nothing: no bytes are sent).
    pub fn alone(&self) -> bool {
        self.one_rank
    }

    /// Sums, over the group, pieces of `sizes` elements laid one after another in `target`:
    /// `fill(pieces, elems)` writes each bucket (its pieces, at those elements of the target)
    /// before it goes; `progress` says when. Returns the exchange's times and the seconds
    /// the caller waited for it once the values were there.
    pub(super) fn sum(
        &self,
        sizes: &[usize],
        target: Target<'_>,
        fill: &mut dyn FnMut(Range<usize>, Range<usize>),
        progress: Progress<'_, '_>,
    ) -> Summed {
        let buckets = buckets::plan(sizes, &self.cfg);
        let plan = sum::Plan {
            buckets: &buckets,
            pieces: sizes.len(),
            overlap: self.cfg.overlap,
        };
        sum::sum(&self.reducer, plan, target, fill, progress)
    }

    /// The one summing operation (`Exchange::sum`) over host memory, `fill` given each
    /// bucket as a slice.
    pub fn sum_host(
        &self,
        sizes: &[usize],
        buf: &mut [f32],
        fill: &mut dyn FnMut(Range<usize>, &mut [f32]),
        progress: Progress<'_, '_>,
    ) -> Summed {
        let target = Target::host(buf);
        let (base, len) = (target.base, target.len);
        let mut fill_slice = |pieces: Range<usize>, elems: Range<usize>| {
            assert!(elems.end <= len, "a bucket lies within the buffer");
            // SAFETY: `elems` is one bucket of `buf` (borrowed for this call), filled before
            // it is handed over and not touched by the communication thread until then.
            let bucket =
                unsafe { std::slice::from_raw_parts_mut(base.add(elems.start), elems.len()) };
            fill(pieces, bucket)
        };
        self.sum(sizes, target, &mut fill_slice, progress)
    }

    /// [`Exchange::sum_host`] of pieces that lie one after another in `src`, copied into
    /// `buf` bucket by bucket as each goes, after backward (`auto`'s probe, comm-bench).
    pub fn sum_copied(&self, sizes: &[usize], src: &[f32], buf: &mut [f32]) -> ExchangeTimes {
        let mut fill = |r: Range<usize>, dst: &mut [f32]| {
            let start: usize = sizes[..r.start].iter().sum();
            dst.copy_from_slice(&src[start..start + dst.len()]);
        };
        self.sum_host(sizes, buf, &mut fill, Progress::After).times
    }
}

/// This rank's part in a step's gradient sum: the weight its gradients are scaled by (its
/// share of the global batch) and whether it asks the group to stop.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Share {
    /// The weight of this rank's gradients.
    pub weight: f32,
    /// This rank's stop flag (any rank's raises the group's).
    pub stop: bool,
}
