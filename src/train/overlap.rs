//! The exchange overlapped with backward, as PyTorch DDP and Horovod do it: a bucket's
//! reduction starts as soon as backward has produced all its gradients, on a communication
//! thread, while backward goes on; the step then waits only for what is still in flight.
//! OpenMPI over TCP and shared memory progresses a collective only inside MPI calls, so the
//! thread makes blocking calls (which progress themselves); the last bucket, as a rule ready
//! only as backward ends, the step's own thread reduces once the thread is done. The pipelined
//! exchange (`allreduce-pipelined`) takes the other way, for MPIs that progress by
//! themselves: no thread — each bucket's non-blocking reduction starts on the thread running
//! backward and later gradient reports test those in flight (docs/measurements.md measures both).
//! Buckets are handed over in the same order on every rank and each is summed by the same
//! call as without overlap, so the sums are the same, bit for bit. MPI must run with at
//! least `MPI_THREAD_SERIALIZED` ([`set_thread_level`]): while the thread reduces, the step
//! makes no MPI call. Without it, every bucket is reduced after backward, in order, as
//! before. The buckets may lie on CUDA (gradient views handed to a CUDA-aware MPI): the
//! thread reducing a bucket then waits for the device's kernels first.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use mpi::ffi;

use super::exchange::{buckets, unix_s, ExchangeConfig, ExchangeMethod, ExchangeTimes};
use super::hierarchy::{self, Topology};
use super::inplace::{self, InFlight, RawComm};

static SERIALIZED: AtomicBool = AtomicBool::new(false);

/// Records whether MPI runs with at least `MPI_THREAD_SERIALIZED` (set once after init).
pub fn set_thread_level(serialized: bool) {
    SERIALIZED.store(serialized, Ordering::Relaxed);
}

/// Whether `cfg`'s exchange overlaps with backward here: asked for, a per-bucket method
/// (`allreduce`, `hierarchical`, `allreduce-pipelined`), and a thread level that allows it
/// (the pipelined exchange's calls come from the thread running backward, which on CUDA
/// may not be the step's).
pub fn overlaps(cfg: &ExchangeConfig) -> bool {
    cfg.overlap
        && SERIALIZED.load(Ordering::Relaxed)
        && matches!(
            cfg.method,
            ExchangeMethod::Allreduce
                | ExchangeMethod::Hierarchical
                | ExchangeMethod::AllreducePipelined
        )
}

/// What the communication thread reduces with: the group's handle, or its topology.
#[derive(Clone, Copy)]
enum Reducer<'t> {
    Flat(ffi::MPI_Comm),
    Nodes(&'t Topology),
}

/// The reducer and the buckets' memory cross to the communication thread, which alone
/// makes MPI calls while it runs (the thread level is at least serialized).
#[derive(Clone, Copy)]
struct ForThread<'t> {
    reducer: Reducer<'t>,
    base: *mut f32,
    /// The CUDA device whose kernels must have completed before MPI reads a bucket.
    cuda: Option<usize>,
}
// SAFETY: the handle and the topology's communicators are used by one thread at a time
// (the communication thread's copy, then the step thread's): the step thread makes no MPI
// call until the communication thread has finished. The memory at `base` is the step's
// buckets; each is handed over once, after it was filled, and nothing else touches it
// until the thread has finished.
unsafe impl Send for ForThread<'_> {}

impl ForThread<'_> {
    /// Reduces the step's bucket `k`, the elements `elems` of the buffer; returns when the
    /// reduction started (Unix seconds), after any wait for the device.
    fn reduce(&self, elems: Range<usize>, k: usize) -> f64 {
        if let Some(i) = self.cuda {
            // MPI reads device memory: the kernels that wrote the bucket must be done.
            tch::Cuda::synchronize(i as i64);
        }
        let started = unix_s();
        // SAFETY: `elems` lies within the buffer (`Target`'s contract), no other bucket
        // overlaps it, and nothing else uses it until this returns; the communicator is
        // a live one of this process.
        unsafe {
            let ptr = self.base.add(elems.start);
            match self.reducer {
                Reducer::Flat(comm) => inplace::allreduce_bucket(comm, ptr, elems.len(), k > 0),
                Reducer::Nodes(t) => t.allreduce_raw(ptr, elems.len(), k > 0),
            }
        }
        started
    }
}

/// The memory the buckets are reduced in, one after another from its start: host memory,
/// or CUDA memory handed to a CUDA-aware MPI.
pub struct Target<'a> {
    base: *mut f32,
    len: usize,
    cuda: Option<usize>,
    _buf: std::marker::PhantomData<&'a mut [f32]>,
}

impl<'a> Target<'a> {
    /// Host memory, borrowed for the step.
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
    /// Nothing but the step's `fill` may read or write `flat` while the step runs; on CUDA
    /// the MPI must take device memory.
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

/// One step's exchange overlapped with its backward, on host memory. `backward` runs the
/// step's backward pass and calls `ready(i)` as piece `i` (of `sizes`, in exchange order)
/// gets its gradient; each bucket that becomes complete, in order, is filled by `fill`
/// (for gradient views: scaled by the rank's weight, the stop flag set) and its reduction
/// started: handed to the communication thread (the last one is reduced by the step's own
/// thread once that thread is done), or for the pipelined exchange started right there
/// ([`Tested`]). `known`, if any, is a piece whose value is known before backward
/// (the stop flag): it counts as ready from the start, or its bucket would wait for
/// backward to return. Buckets still pending when `backward` returns go then. Returns each
/// bucket's (start, end) and the seconds the step waited for the exchange after backward.
pub fn overlapped<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    (sizes, known): (&[usize], Option<usize>),
    buf: &mut [f32],
    fill: &mut dyn FnMut(Range<usize>, &mut [f32]),
    backward: &mut Backward<'_>,
) -> (ExchangeTimes, f64) {
    let target = Target::host(buf);
    let base = target.base;
    let mut fill_slice = |pieces: Range<usize>, elems: Range<usize>| {
        // SAFETY: `elems` is one bucket of `buf` (borrowed for this call), filled before
        // it is handed over and not touched by the communication thread until then.
        let bucket = unsafe { std::slice::from_raw_parts_mut(base.add(elems.start), elems.len()) };
        fill(pieces, bucket)
    };
    overlapped_in(comm, cfg, (sizes, known), target, &mut fill_slice, backward)
}

/// [`overlapped`] on any [`Target`]: `fill` gets each bucket's pieces and its elements'
/// range in the target (on CUDA, it writes them with kernels; the device is waited for
/// before each reduction — by the thread that reduces it, or for the pipelined exchange by
/// the gradient report, which stalls backward's launches as the copying path's copy does).
pub fn overlapped_in<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    (sizes, known): (&[usize], Option<usize>),
    target: Target<'_>,
    fill: &mut dyn FnMut(Range<usize>, Range<usize>),
    backward: &mut Backward<'_>,
) -> (ExchangeTimes, f64) {
    let plan = buckets(sizes, cfg);
    let topo = (cfg.method == ExchangeMethod::Hierarchical).then(|| hierarchy::topology_of(comm));
    let reducer = ForThread {
        reducer: match &topo {
            Some(t) => Reducer::Nodes(t),
            None => Reducer::Flat(comm.as_raw()),
        },
        base: target.base,
        cuda: target.cuda,
    };
    let started = Instant::now();
    let mut ranges = Vec::with_capacity(plan.len());
    let mut at = 0;
    for b in &plan {
        ranges.push(at..at + b.elems);
        at += b.elems;
    }
    assert!(at <= target.len, "the buckets lie within the target");
    let mut readiness = Readiness::new(&plan, sizes.len());
    if cfg.method == ExchangeMethod::AllreducePipelined {
        let mut fill_k = |k: usize| fill(plan[k].pieces.clone(), ranges[k].clone());
        let mut tested = Tested {
            comm,
            ranges: &ranges,
            target: &target,
            fill: &mut fill_k,
            inflight: InFlight::new(),
            spans: vec![(0.0, 0.0); plan.len()],
        };
        let waited = tested.step(&mut readiness, known, backward);
        return (
            ExchangeTimes {
                seconds: started.elapsed().as_secs_f64(),
                buckets: std::mem::take(&mut tested.spans),
            },
            waited,
        );
    }
    let (buckets, waited) = threaded(reducer, &plan, &ranges, (readiness, known), fill, backward);
    (
        ExchangeTimes {
            seconds: started.elapsed().as_secs_f64(),
            buckets,
        },
        waited,
    )
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
    reducer: ForThread<'_>,
    plan: &[super::exchange::Bucket],
    ranges: &[Range<usize>],
    (mut readiness, known): (Readiness, Option<usize>),
    fill: &mut dyn FnMut(Range<usize>, Range<usize>),
    backward: &mut Backward<'_>,
) -> (Vec<(f64, f64)>, f64) {
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
                    let t = reducer.reduce(elems, k);
                    spans.push((k, t, unix_s()));
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
        let t = reducer.reduce(ranges[last].clone(), last);
        spans.push((last, t, unix_s()));
        (spans, after.elapsed().as_secs_f64())
    });
    let mut buckets = vec![(0.0, 0.0); plan.len()];
    for (k, a, b) in spans {
        buckets[k] = (a, b);
    }
    (buckets, waited)
}

/// The pipelined exchange overlapped with backward, progressed by test calls: each bucket
/// that may go is filled and its in-place `MPI_Iallreduce` started on the thread running
/// backward, and every gradient report tests those in flight (OpenMPI progresses them only
/// inside MPI calls); after backward the step waits for the rest. The calls are those of
/// `--no-overlap` ([`InFlight::start_raw`]), so the sums are too.
struct Tested<'s, 'm, C: RawComm> {
    comm: &'s C,
    ranges: &'s [Range<usize>],
    target: &'s Target<'m>,
    /// Fills bucket `k`.
    fill: &'s mut dyn FnMut(usize),
    inflight: InFlight<'m>,
    /// Each bucket's (start, end), Unix seconds; the end as a test call finds it done.
    spans: Vec<(f64, f64)>,
}

impl<C: RawComm> Tested<'_, '_, C> {
    /// Runs `backward`, reducing buckets as they may go; returns the seconds waited after it.
    fn step(
        &mut self,
        readiness: &mut Readiness,
        known: Option<usize>,
        backward: &mut Backward<'_>,
    ) -> f64 {
        if let Some(i) = known {
            self.go(readiness.ready(i));
        }
        backward(&mut |i| {
            self.go(readiness.ready(i));
            self.test();
        });
        let after = Instant::now();
        self.go(readiness.rest());
        for k in self.inflight.wait_all() {
            self.spans[k].1 = unix_s();
        }
        after.elapsed().as_secs_f64()
    }

    /// Fills and starts the buckets `go`, in order.
    fn go(&mut self, go: Range<usize>) {
        for k in go {
            (self.fill)(k);
            if let Some(i) = self.target.cuda {
                // MPI reads device memory: the kernels that wrote the bucket must be done.
                tch::Cuda::synchronize(i as i64);
            }
            let elems = self.ranges[k].clone();
            self.spans[k].0 = unix_s();
            // SAFETY: `elems` lies within the target (checked by `overlapped_in`), no other
            // bucket overlaps it, and nothing touches it until its reduction is complete:
            // the blocking call returns, or `inflight` (dropped by the end of the step at
            // the latest) has waited for it.
            let alone = self.ranges.len() == 1;
            let done = unsafe {
                let ptr = self.target.base.add(elems.start);
                self.inflight
                    .start_raw(k, self.comm, ptr, elems.len(), alone)
            };
            if done {
                self.spans[k].1 = unix_s();
            }
        }
    }

    /// Lets MPI progress the reductions in flight, noting those that completed.
    fn test(&mut self) {
        for k in self.inflight.test() {
            self.spans[k].1 = unix_s();
        }
    }
}

/// Which buckets may go: a bucket goes once all its pieces are ready and every earlier
/// bucket has gone, so every rank hands them over in the same order.
struct Readiness {
    /// Each piece's bucket.
    bucket_of: Vec<usize>,
    /// Each bucket's pieces not yet ready.
    missing: Vec<usize>,
    /// Pieces reported (a second report of one is ignored).
    seen: Vec<bool>,
    /// The first bucket not yet handed over.
    next: usize,
}

impl Readiness {
    /// Nothing ready yet, for `plan`'s buckets of `pieces` pieces.
    fn new(plan: &[super::exchange::Bucket], pieces: usize) -> Readiness {
        let mut bucket_of = vec![0; pieces];
        for (k, b) in plan.iter().enumerate() {
            bucket_of[b.pieces.clone()].fill(k);
        }
        Readiness {
            bucket_of,
            missing: plan.iter().map(|b| b.pieces.len()).collect(),
            seen: vec![false; pieces],
            next: 0,
        }
    }

    /// Piece `i` is ready: the buckets that may go now, in order.
    fn ready(&mut self, i: usize) -> Range<usize> {
        if i < self.seen.len() && !std::mem::replace(&mut self.seen[i], true) {
            self.missing[self.bucket_of[i]] -= 1;
        }
        let from = self.next;
        while self.next < self.missing.len() && self.missing[self.next] == 0 {
            self.next += 1;
        }
        from..self.next
    }

    /// Backward has returned: every bucket not yet gone, in order.
    fn rest(&mut self) -> Range<usize> {
        let from = self.next;
        self.next = self.missing.len();
        from..self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::exchange::Bucket;

    fn plan() -> Vec<Bucket> {
        // Pieces 0-1, 2, 3-4 (the flag last).
        [0..2, 2..3, 3..5]
            .into_iter()
            .map(|pieces| Bucket {
                elems: pieces.len(),
                pieces,
            })
            .collect()
    }

    #[test]
    fn buckets_go_in_order_once_complete() {
        let mut r = Readiness::new(&plan(), 5);
        assert_eq!(r.ready(2), 0..0, "bucket 1 waits for bucket 0");
        assert_eq!(r.ready(1), 0..0);
        assert_eq!(r.ready(1), 0..0, "a second report counts once");
        assert_eq!(
            r.ready(0),
            0..2,
            "bucket 0 completes: 0 and the waiting 1 go"
        );
        assert_eq!(r.ready(3), 2..2);
        assert_eq!(r.rest(), 2..3, "backward returned: the flag's bucket goes");
        assert_eq!(r.rest(), 3..3);
    }

    #[test]
    fn the_flag_ready_first_lets_the_last_bucket_go_before_backward_returns() {
        let mut r = Readiness::new(&plan(), 5);
        assert_eq!(r.ready(4), 0..0);
        for i in 0..3 {
            r.ready(i);
        }
        assert_eq!(
            r.ready(3),
            2..3,
            "the last bucket goes with its last gradient"
        );
        assert_eq!(r.rest(), 3..3, "nothing left for after backward");
        assert_eq!(r.ready(99), 3..3, "an unknown piece changes nothing");
    }
}
