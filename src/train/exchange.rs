//! How a group sums flat f32 buffers (gradients, batch-norm statistics) over its ranks: in
//! buckets of whole tensors (the way PyTorch DDP buckets gradients: a small first bucket,
//! then about 25 MiB each), each reduced as soon as it is filled — by a blocking
//! `MPI_Allreduce` (`allreduce`), or by an `MPI_Iallreduce` that runs while the next bucket
//! is filled, or while backward goes on (`allreduce-pipelined`). `reduce-bcast` is the
//! fallback: one reduce onto the group's rank 0 and one broadcast back, bit-identical on
//! every rank by construction. Both reduce in place ([`super::inplace`]): a bucket is summed
//! where it was filled, with no send buffer.

use std::ops::Range;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::hierarchy;
use super::inplace::{self, InFlight, RawComm};
use super::staging::Staging;
use super::TrainError;

/// The exchange's collective.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExchangeMethod {
    /// The default: `hierarchical` where it measures faster on the run's groups at start-up,
    /// else `allreduce` ([`super::choose`]; resolved before anything is recorded or
    /// exchanged).
    Auto,
    /// Buckets reduced in place by blocking `MPI_Allreduce`, each as soon as it is filled
    /// (the flat exchange; faster than the non-blocking calls where MPI progresses them only
    /// inside MPI calls, as OpenMPI over shared memory and TCP does; measured in
    /// docs/measurements.md).
    Allreduce,
    /// Buckets reduced by non-blocking `MPI_Iallreduce` (for MPIs and interconnects that
    /// progress them asynchronously): overlapped with backward, each starts on the thread
    /// running backward as soon as it may go, and every later gradient report tests those
    /// in flight — MPI's progress by test calls, no communication thread
    /// ([`super::overlap`]); after backward, bucket k+1 is filled while bucket k reduces
    /// (every bucket started at once where the gradients are views of the buckets).
    AllreducePipelined,
    /// One `MPI_Reduce` onto the group's first rank and one `MPI_Bcast` (the fallback).
    ReduceBcast,
    /// Node-aware, per bucket as it is filled: each node's share i of the bucket summed onto
    /// its rank i over shared memory, all-reduced across the nodes among the ranks i, gathered
    /// back inside the node (with unequal nodes: onto the first ranks and broadcast back;
    /// [`super::hierarchy`]).
    Hierarchical,
}

impl ExchangeMethod {
    /// The name as the flag and the records spell it.
    pub fn name(self) -> &'static str {
        match self {
            ExchangeMethod::Auto => "auto",
            ExchangeMethod::Allreduce => "allreduce",
            ExchangeMethod::AllreducePipelined => "allreduce-pipelined",
            ExchangeMethod::ReduceBcast => "reduce-bcast",
            ExchangeMethod::Hierarchical => "hierarchical",
        }
    }
}

/// DDP's default bucket cap, 25 MiB (`bucket_cap_mb=25`).
pub const DEFAULT_BUCKET_BYTES: u64 = 25 << 20;
/// DDP's first bucket, 1 MiB: the first reduction starts early.
pub const DEFAULT_FIRST_BUCKET_BYTES: u64 = 1 << 20;

/// How the exchange is carried out (recorded in the run's configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeConfig {
    /// The collective.
    pub method: ExchangeMethod,
    /// A bucket is closed once it holds at least this many bytes.
    pub bucket_bytes: u64,
    /// The same for the first bucket.
    pub first_bucket_bytes: u64,
    /// Where the buffer is (`--exchange-staging`; absent from older records: `auto`).
    #[serde(default)]
    pub staging: Staging,
    /// Whether buckets are reduced during backward, as they become ready
    /// ([`super::overlap`]; `--no-overlap` turns it off; absent from older records, which
    /// did not overlap: off).
    #[serde(default)]
    pub overlap: bool,
}

impl Default for ExchangeConfig {
    fn default() -> Self {
        ExchangeConfig {
            method: ExchangeMethod::Auto,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            first_bucket_bytes: DEFAULT_FIRST_BUCKET_BYTES,
            staging: Staging::Auto,
            overlap: true,
        }
    }
}

/// One bucket: the pieces (tensors) it holds and its elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Indices of the pieces, consecutive.
    pub pieces: Range<usize>,
    /// Elements, Σ of the pieces' sizes.
    pub elems: usize,
}

/// Splits pieces of `sizes` elements (in order) into buckets of whole pieces: each closed
/// once it holds at least the cap (the first bucket's cap for the first).
pub fn buckets(sizes: &[usize], cfg: &ExchangeConfig) -> Vec<Bucket> {
    let cap = |first: bool| {
        let bytes = if first {
            cfg.first_bucket_bytes
        } else {
            cfg.bucket_bytes
        };
        (bytes / 4).max(1) as usize
    };
    let mut out = Vec::new();
    let (mut start, mut elems) = (0, 0);
    for (i, &n) in sizes.iter().enumerate() {
        elems += n;
        if elems >= cap(out.is_empty()) {
            out.push(Bucket {
                pieces: start..i + 1,
                elems,
            });
            (start, elems) = (i + 1, 0);
        }
    }
    if start < sizes.len() {
        out.push(Bucket {
            pieces: start..sizes.len(),
            elems,
        });
    }
    out
}

/// What `fill` is asked for: write the values of `pieces` (concatenated) into the slice.
pub type Fill<'f> = dyn FnMut(Range<usize>, &mut [f32]) -> Result<(), TrainError> + 'f;

/// This machine's Unix time, seconds (the spans of a trace; ranks add their clock offset).
pub fn unix_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What one exchange took: seconds from the first fill to the last completion, and each
/// bucket's (start, end) in Unix seconds — from the moment its reduction was started to the
/// moment it was seen complete.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExchangeTimes {
    /// Wall seconds of the whole exchange.
    pub seconds: f64,
    /// Per bucket, in order.
    pub buckets: Vec<(f64, f64)>,
}

/// Sums, over `comm`, the pieces of `sizes` elements that `fill` writes: on return `buf`
/// (Σ `sizes` elements) holds the sums. Every rank completes every collective even if its
/// `fill` fails (its values are then zeros and the error is returned after), so a failing
/// rank never leaves the others waiting.
pub fn exchange<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    sizes: &[usize],
    fill: &mut Fill<'_>,
    buf: &mut [f32],
) -> Result<ExchangeTimes, TrainError> {
    let started = Instant::now();
    let mut failed = None;
    let mut fill_or_zero = |pieces: Range<usize>, dst: &mut [f32]| {
        if let Err(e) = fill(pieces, dst) {
            dst.fill(0.0);
            failed.get_or_insert(e);
        }
    };
    let spans = match cfg.method {
        ExchangeMethod::ReduceBcast => {
            fill_or_zero(0..sizes.len(), buf);
            let t = unix_s();
            inplace::reduce_bcast(comm, buf);
            vec![(t, unix_s())]
        }
        // `auto` is resolved before any exchange ([`super::choose::prepare`]); unresolved it
        // is the flat one.
        ExchangeMethod::Allreduce | ExchangeMethod::Auto => {
            bucketed(comm, &buckets(sizes, cfg), &mut fill_or_zero, buf)
        }
        ExchangeMethod::Hierarchical => {
            let topo = hierarchy::topology_of(comm);
            let reduce = |slice: &mut [f32], k: usize| {
                // SAFETY: `slice` is valid for its length for the whole (blocking) call.
                unsafe { topo.allreduce_raw(slice.as_mut_ptr(), slice.len(), k > 0) }
            };
            each_bucket(&buckets(sizes, cfg), &mut fill_or_zero, buf, reduce)
        }
        ExchangeMethod::AllreducePipelined => {
            pipelined(comm, &buckets(sizes, cfg), &mut fill_or_zero, buf)
        }
    };
    match failed {
        Some(e) => Err(e),
        None => Ok(ExchangeTimes {
            seconds: started.elapsed().as_secs_f64(),
            buckets: spans,
        }),
    }
}

/// [`exchange`] of pieces that lie one after another in `src` (the emulated trainer's
/// gradient, comm-bench's message): each bucket is copied out of `src` as it is filled.
pub fn exchange_flat<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    sizes: &[usize],
    src: &[f32],
    buf: &mut [f32],
) -> Result<ExchangeTimes, TrainError> {
    let mut fill = |r: Range<usize>, dst: &mut [f32]| {
        let start: usize = sizes[..r.start].iter().sum();
        dst.copy_from_slice(&src[start..start + dst.len()]);
        Ok(())
    };
    exchange(comm, cfg, sizes, &mut fill, buf)
}

/// Sums over `comm` the pieces of `sizes` elements already in place, one after another, at
/// `data` (a flat buffer on the tensors' device, `--exchange-staging device`): each bucket
/// by a blocking in-place `MPI_Allreduce` (the values are all there before the first starts,
/// so there is no copy to overlap), by the pipelined exchange's non-blocking calls (the
/// same calls as overlapped, so the same sums), or one reduce + broadcast.
///
/// # Safety
/// `data` must be valid for Σ `sizes` f32s that MPI can read and write (host memory, or
/// device memory with a CUDA-aware MPI, every kernel writing it completed), untouched
/// otherwise until this returns.
pub unsafe fn exchange_resident<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    sizes: &[usize],
    data: *mut f32,
) -> ExchangeTimes {
    let started = Instant::now();
    let spans = match cfg.method {
        ExchangeMethod::ReduceBcast => {
            let t = unix_s();
            inplace::reduce_bcast_raw(comm, data, sizes.iter().sum());
            vec![(t, unix_s())]
        }
        ExchangeMethod::AllreducePipelined => pipelined_resident(comm, &buckets(sizes, cfg), data),
        ExchangeMethod::Allreduce | ExchangeMethod::Auto | ExchangeMethod::Hierarchical => {
            let topo =
                (cfg.method == ExchangeMethod::Hierarchical).then(|| hierarchy::topology_of(comm));
            let mut offset = 0;
            (buckets(sizes, cfg).iter())
                .map(|b| {
                    let t = unix_s();
                    match &topo {
                        Some(topo) => topo.allreduce_raw(data.add(offset), b.elems, offset > 0),
                        None => inplace::allreduce_bucket(
                            comm.as_raw(),
                            data.add(offset),
                            b.elems,
                            offset > 0,
                        ),
                    }
                    offset += b.elems;
                    (t, unix_s())
                })
                .collect()
        }
    };
    ExchangeTimes {
        seconds: started.elapsed().as_secs_f64(),
        buckets: spans,
    }
}

/// The pipelined exchange on buckets already in place at `data`: every bucket's reduction
/// started in order ([`InFlight::start_raw`]), then all waited for. Returns each bucket's
/// (start, end).
///
/// # Safety
/// As [`exchange_resident`], for the buckets' Σ elements.
unsafe fn pipelined_resident<C: RawComm>(
    comm: &C,
    plan: &[Bucket],
    data: *mut f32,
) -> Vec<(f64, f64)> {
    let mut spans = vec![(0.0, 0.0); plan.len()];
    let mut inflight = InFlight::new();
    let mut offset = 0;
    for (k, b) in plan.iter().enumerate() {
        spans[k].0 = unix_s();
        if inflight.start_raw(k, comm, data.add(offset), b.elems, plan.len() == 1) {
            spans[k].1 = unix_s();
        }
        offset += b.elems;
    }
    for k in inflight.wait_all() {
        spans[k].1 = unix_s();
    }
    spans
}

/// Fills each bucket and reduces it in place with a blocking `MPI_Allreduce`, in turn.
/// Returns each bucket's (start, end).
fn bucketed<C: RawComm>(
    comm: &C,
    buckets: &[Bucket],
    fill: &mut dyn FnMut(Range<usize>, &mut [f32]),
    buf: &mut [f32],
) -> Vec<(f64, f64)> {
    each_bucket(buckets, fill, buf, |slice, k| {
        // SAFETY: `slice` is valid for its length and used by nothing else during the call.
        unsafe { inplace::allreduce_bucket(comm.as_raw(), slice.as_mut_ptr(), slice.len(), k > 0) }
    })
}

/// Fills each bucket and sums it in place with the blocking `reduce(bucket, k)`, in turn.
/// Returns each bucket's (start, end).
fn each_bucket(
    buckets: &[Bucket],
    fill: &mut dyn FnMut(Range<usize>, &mut [f32]),
    buf: &mut [f32],
    reduce: impl Fn(&mut [f32], usize),
) -> Vec<(f64, f64)> {
    let mut spans = Vec::with_capacity(buckets.len());
    let mut rest = buf;
    for (k, b) in buckets.iter().enumerate() {
        let (slice, tail) = std::mem::take(&mut rest).split_at_mut(b.elems);
        rest = tail;
        fill(b.pieces.clone(), slice);
        let t = unix_s();
        reduce(slice, k);
        spans.push((t, unix_s()));
    }
    spans
}

/// Fills each bucket and starts its in-place `MPI_Iallreduce`, testing the earlier ones
/// between fills (OpenMPI progresses non-blocking collectives inside MPI calls); then waits
/// for all ([`InFlight::start_raw`]: a single bucket is one blocking call). Returns each
/// bucket's (start, end).
fn pipelined<C: RawComm>(
    comm: &C,
    buckets: &[Bucket],
    fill: &mut dyn FnMut(Range<usize>, &mut [f32]),
    buf: &mut [f32],
) -> Vec<(f64, f64)> {
    let mut spans = vec![(0.0, 0.0); buckets.len()];
    let mut inflight = InFlight::new();
    let mut rest = buf;
    for (i, b) in buckets.iter().enumerate() {
        let (slice, tail) = std::mem::take(&mut rest).split_at_mut(b.elems);
        rest = tail;
        fill(b.pieces.clone(), slice);
        for k in inflight.test() {
            spans[k].1 = unix_s();
        }
        spans[i].0 = unix_s();
        if inflight.start(i, comm, slice, buckets.len() == 1) {
            spans[i].1 = unix_s();
        }
    }
    for k in inflight.wait_all() {
        spans[k].1 = unix_s();
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(first: u64, rest: u64) -> ExchangeConfig {
        ExchangeConfig {
            method: ExchangeMethod::Allreduce,
            bucket_bytes: rest,
            first_bucket_bytes: first,
            staging: Staging::Auto,
            overlap: true,
        }
    }

    #[test]
    fn names_are_spelt_as_the_flag_and_the_records_spell_them() {
        use clap::ValueEnum;
        for m in ExchangeMethod::value_variants() {
            let flag = m.to_possible_value().unwrap();
            assert_eq!(m.name(), flag.get_name());
            assert_eq!(
                serde_json::to_string(m).unwrap(),
                format!("\"{}\"", m.name())
            );
        }
    }

    #[test]
    fn buckets_hold_whole_pieces_with_a_small_first_one() {
        // Caps of 4 and 8 elements (16 and 32 bytes).
        let b = buckets(&[3, 2, 5, 1, 1, 9, 2], &cfg(16, 32));
        let pieces: Vec<Range<usize>> = b.iter().map(|b| b.pieces.clone()).collect();
        assert_eq!(pieces, vec![0..2, 2..6, 6..7]);
        assert_eq!(b.iter().map(|b| b.elems).collect::<Vec<_>>(), [5, 16, 2]);
        // A piece at or above the cap on an empty bucket is a bucket of its own.
        let b = buckets(&[9, 1], &cfg(16, 32));
        assert_eq!(b[0].pieces, 0..1);
        assert!(buckets(&[], &cfg(16, 32)).is_empty());
        // A cap of 0 bytes: one piece per bucket.
        assert_eq!(buckets(&[1, 1], &cfg(0, 0)).len(), 2);
        // The default: ResNet-50's 25.6 M parameters make about four buckets.
        let r50 = vec![25_557_032 / 100; 100];
        let n = buckets(&r50, &ExchangeConfig::default()).len();
        assert!((4..=6).contains(&n), "{n}");
    }
}
