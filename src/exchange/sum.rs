//! The one way the exchange sums: buckets of a [`Target`] (host memory, or a tensor's memory
//! on the CPU or on CUDA), each filled by the caller's `fill` and reduced by the
//! [`Reducer`] in order — after backward, or during it ([`Progress`]).
//!
//! During backward, as PyTorch DDP and Horovod do it: a bucket's reduction starts as soon
//! as backward has produced all its gradients, on a communication thread, while backward
//! goes on; the step then waits only for what is still in flight. OpenMPI over TCP and
//! shared memory progresses a collective only inside MPI calls, so the thread makes blocking
//! calls (which progress themselves); the last bucket, as a rule ready only as backward
//! ends, the step's own thread reduces once the thread is done. MPI must run with at least
//! `MPI_THREAD_SERIALIZED` ([`super::ExchangeConfig::within`]): while the thread
//! reduces, the step makes no MPI call. On CUDA the thread reducing a bucket waits for the
//! device's kernels first.
//!
//! Gradients as views of the buckets, gradients copied through a host buffer, batch-norm
//! statistics, the emulated trainer's synthetic gradients, `auto`'s probe and comm-bench all
//! come here; only their `fill` differs. Every path makes the same calls in the same order,
//! so their sums agree bit for bit.

use std::ops::Range;
use std::sync::mpsc;
use std::time::Instant;

use super::buckets::{Bucket, Readiness};
use super::Reducer;

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

/// The memory the buckets are reduced in, one after another from its start: host memory,
/// or a tensor's (CPU, or CUDA handed to a CUDA-aware MPI).
pub struct Target<'a> {
    pub(super) base: *mut f32,
    pub(super) len: usize,
    /// The CUDA device whose kernels must have completed before MPI reads a bucket.
    pub(super) cuda: Option<usize>,
    _buf: std::marker::PhantomData<&'a mut [f32]>,
}

impl<'a> Target<'a> {
    /// Host memory, borrowed for the exchange.
    pub fn host(buf: &'a mut [f32]) -> Target<'a> {
        Target {
            base: buf.as_mut_ptr(),
            len: buf.len(),
            cuda: None,
            _buf: std::marker::PhantomData,
        }
    }

    /// The memory of `flat`, a contiguous f32 tensor on the CPU or on CUDA.
    ///
    /// # Safety
    /// Nothing but the exchange's `fill` may read or write `flat` while the exchange runs;
    /// on CUDA the MPI must take device memory.
    pub unsafe fn tensor(flat: &'a tch::Tensor) -> Target<'a> {
        debug_assert!(flat.is_contiguous() && flat.kind() == tch::Kind::Float);
        Target {
            base: flat.data_ptr().cast(),
            len: flat.numel(),
            cuda: match flat.device() {
                tch::Device::Cuda(i) => Some(i),
                _ => None,
            },
            _buf: std::marker::PhantomData,
        }
    }
}

/// A step's backward pass: it calls the given `ready(i)` when piece `i` holds its gradient
/// (in any order; a bucket goes when all its pieces are ready and every earlier bucket has
/// gone, so every rank reduces the buckets in the same order).
pub type Backward<'b> = dyn FnMut(&mut dyn FnMut(usize)) + 'b;

/// When the buckets are reduced.
pub enum Progress<'p, 'b> {
    /// The values are all there (or `fill` writes them): each bucket is filled and reduced
    /// in turn.
    After,
    /// While `backward` runs: each bucket that backward completes is filled and handed to
    /// the communication thread; `known` is a piece whose value is known before backward
    /// (the stop flag), ready from the start. Where the exchange does not overlap
    /// ([`super::Exchange::overlaps`]), backward runs first and the buckets go after it.
    During {
        /// The backward pass.
        backward: &'p mut Backward<'b>,
        /// A piece ready before backward.
        known: Option<usize>,
    },
}

/// Where a bucket's values lie for MPI: the target's first element and, on CUDA, the
/// device whose kernels must have completed before MPI reads it.
#[derive(Clone, Copy)]
pub(super) struct Memory {
    base: *mut f32,
    cuda: Option<usize>,
}

impl Memory {
    fn of(target: &Target<'_>) -> Memory {
        Memory {
            base: target.base,
            cuda: target.cuda,
        }
    }
}

/// A bucket's reduction: started (after any wait for the device) and ended, Unix seconds.
fn reduce_bucket(
    reducer: &Reducer<'_>,
    memory: Memory,
    elems: Range<usize>,
    k: usize,
) -> (f64, f64) {
    if let Some(i) = memory.cuda {
        // MPI reads device memory: the kernels that wrote the bucket must be done.
        tch::Cuda::synchronize(i as i64);
    }
    let started = crate::host::unix_s();
    // SAFETY: `elems` lies within the target (checked by `sum`), no other bucket overlaps
    // it, nothing else uses it until this returns, and only this thread calls MPI now.
    unsafe { reducer.reduce(memory.base.add(elems.start), elems.len(), k > 0) };
    (started, crate::host::unix_s())
}

/// The buckets of one exchange: their plan (pieces and sizes), the elements of the target
/// each covers, and the target's memory.
struct Layout<'a> {
    plan: &'a [Bucket],
    ranges: Vec<Range<usize>>,
    memory: Memory,
}

/// How one exchange goes: its buckets, the number of pieces they hold, and whether they
/// may be reduced during backward.
pub(super) struct Plan<'a> {
    pub(super) buckets: &'a [Bucket],
    pub(super) pieces: usize,
    pub(super) overlap: bool,
}

/// Sums the buckets of `target` that `plan` lays out over the reducer's group:
/// `fill(pieces, elems)` writes each bucket before it goes. Returns the times and the
/// seconds the caller waited for the exchange once the values were there (after backward,
/// when it ran during it).
pub(super) fn sum(
    reducer: &Reducer<'_>,
    plan: Plan<'_>,
    target: Target<'_>,
    fill: &mut dyn FnMut(Range<usize>, Range<usize>),
    progress: Progress<'_, '_>,
) -> Summed {
    let Plan {
        buckets: plan,
        pieces,
        overlap,
    } = plan;
    let started = Instant::now();
    let mut ranges = Vec::with_capacity(plan.len());
    let mut at = 0;
    for b in plan {
        ranges.push(at..at + b.elems);
        at += b.elems;
    }
    assert!(at <= target.len, "the buckets lie within the target");
    let layout = Layout {
        plan,
        ranges,
        memory: Memory::of(&target),
    };
    let (buckets, waited) = match progress {
        Progress::During { backward, known } if overlap => {
            let readiness = Readiness::new(plan, pieces);
            threaded(reducer, &layout, readiness, known, fill, backward)
        }
        Progress::During { backward, .. } => {
            backward(&mut |_| {});
            let after = Instant::now();
            let spans = in_turn(reducer, &layout, fill);
            (spans, after.elapsed().as_secs_f64())
        }
        Progress::After => {
            let spans = in_turn(reducer, &layout, fill);
            (spans, started.elapsed().as_secs_f64())
        }
    };
    Summed {
        times: ExchangeTimes {
            seconds: started.elapsed().as_secs_f64(),
            buckets,
        },
        waited_s: waited,
    }
}

/// What one sum took.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summed {
    /// The exchange's times.
    pub times: ExchangeTimes,
    /// The seconds the caller waited for it once the values were there.
    pub waited_s: f64,
}

/// Fills and reduces each bucket in turn on this thread.
fn in_turn(
    reducer: &Reducer<'_>,
    layout: &Layout<'_>,
    fill: &mut dyn FnMut(Range<usize>, Range<usize>),
) -> Vec<(f64, f64)> {
    (layout.plan.iter().zip(&layout.ranges).enumerate())
        .map(|(k, (b, elems))| {
            fill(b.pieces.clone(), elems.clone());
            reduce_bucket(reducer, layout.memory, elems.clone(), k)
        })
        .collect()
}

/// The reducer and the buckets' memory cross to the communication thread, which alone
/// makes MPI calls while it runs (the thread level is at least serialized).
#[derive(Clone, Copy)]
struct ForThread<'r, 'c> {
    reducer: &'r Reducer<'c>,
    memory: Memory,
}
// SAFETY: the reducer's communicators are used by one thread at a time (the communication
// thread, then the step's): the step's thread makes no MPI call until the communication
// thread has finished. The memory at `base` is the step's buckets; each is handed over once,
// after it was filled, and nothing else touches it until the thread has finished.
unsafe impl Send for ForThread<'_, '_> {}
unsafe impl Sync for ForThread<'_, '_> {}

impl ForThread<'_, '_> {
    /// Reduces bucket `k`, the elements `elems` of the target: (start, end).
    fn reduce(&self, elems: Range<usize>, k: usize) -> (f64, f64) {
        reduce_bucket(self.reducer, self.memory, elems, k)
    }
}

/// The step's exchange on a communication thread: each bucket that may go is filled and
/// handed to the thread, which reduces them in order with blocking calls and ends after the
/// last but one. The last bucket — as a rule complete only as backward ends — the step's
/// own thread reduces once the communication thread has ended: where that thread is done by
/// then, the reduction the step waits for needs no hand-over and no wake-up of either thread
/// (on a busy machine each costs a scheduling delay); where it is not, the step waits for it
/// as before. With one bucket there is no thread. Every bucket is still reduced by the same
/// call in the same order. Returns each bucket's (start, end) and the seconds waited after
/// backward.
fn threaded(
    reducer: &Reducer<'_>,
    layout: &Layout<'_>,
    mut readiness: Readiness,
    known: Option<usize>,
    fill: &mut dyn FnMut(Range<usize>, Range<usize>),
    backward: &mut Backward<'_>,
) -> (Vec<(f64, f64)>, f64) {
    let (plan, ranges) = (layout.plan, &layout.ranges);
    let reducer = ForThread {
        reducer,
        memory: layout.memory,
    };
    let Some(last) = plan.len().checked_sub(1) else {
        backward(&mut |_| {});
        return (Vec::new(), 0.0);
    };
    let (spans, waited) = std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<(usize, Range<usize>)>();
        // The communication thread, for every bucket but the last (none for one bucket),
        // with its own copy of the reducer.
        let worker = (last > 0).then(|| {
            s.spawn(move || {
                let mut spans = Vec::new();
                for (k, elems) in rx {
                    let (t, end) = reducer.reduce(elems, k);
                    spans.push((k, t, end));
                    if k + 1 == last {
                        break;
                    }
                }
                spans
            })
        });
        let mut send = |go: Range<usize>| {
            for k in go {
                fill(plan[k].pieces.clone(), ranges[k].clone());
                if k < last {
                    // Fails only if the thread has died; joining it below reports that (a
                    // panic here could unwind into the autograd hook's C++ frame).
                    let _ = tx.send((k, ranges[k].clone()));
                }
            }
        };
        let mut ready = |i: usize| send(readiness.ready(i));
        if let Some(i) = known {
            ready(i);
        }
        backward(&mut ready);
        // From here the step waits for the exchange: buckets still to fill (pieces no hook
        // reported) count as exchange.
        let after = Instant::now();
        send(readiness.rest());
        drop(tx);
        let mut spans = worker.map_or_else(Vec::new, |w| {
            w.join().expect("the communication thread does not panic")
        });
        // The communication thread, if any, has ended: this thread may call MPI.
        let (t, end) = reducer.reduce(ranges[last].clone(), last);
        spans.push((last, t, end));
        (spans, after.elapsed().as_secs_f64())
    });
    let mut buckets = vec![(0.0, 0.0); plan.len()];
    for (k, a, b) in spans {
        buckets[k] = (a, b);
    }
    (buckets, waited)
}

/// What one exchange cost.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncStats {
    /// Bytes sent by this rank (the buckets, once).
    pub bytes: u64,
    /// Seconds the caller waited for the exchange once the values were there (during
    /// backward: after backward returned).
    pub seconds: f64,
    /// Whether every exchanged value's sum is finite (the same on every rank).
    pub finite: bool,
    /// Each bucket's (start, end), Unix seconds (for `--trace-steps`).
    pub buckets: Vec<(f64, f64)>,
}

impl SyncStats {
    /// The figures of an exchange of `elems` f32s (a group of one rank sends nothing,
    /// whatever the call costs). `finite` is the same on every rank, as the sums are.
    pub(super) fn of(
        ex: &super::Exchange<'_>,
        elems: usize,
        times: ExchangeTimes,
        finite: bool,
    ) -> Self {
        let sent = if ex.alone() { 0 } else { elems };
        SyncStats {
            bytes: (sent * std::mem::size_of::<f32>()) as u64,
            seconds: times.seconds,
            buckets: times.buckets,
            finite,
        }
    }
}
