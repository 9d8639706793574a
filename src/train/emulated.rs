//! The emulated trainer (`--trainer emulated`): the accelerator is a wait of (the step's
//! operations ÷ `--emulated-ops` per accelerator) — no CPU burned, so many ranks fit on one
//! machine — but every step exchanges a gradient of the architecture's real parameter count,
//! layer by layer in backward order, through the training's own exchange ([`crate::exchange`]:
//! buckets, the overlap with backward, the stop flag); the search, the protocol and the records are the real
//! ones. Accuracy follows the simulated trainer's learning curve. For weak-scaling studies of
//! the interconnect; a run is INVALID by the rules (its trainer is not `real`).

use std::time::{Duration, Instant};

use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;

use super::simulated::SimTrial;
use super::{exchange_spans, EpochStats, Span, SpanKind, TrainError, Trainer, TrialRun, TrialSpec};
use crate::exchange::{Exchange, ExchangeConfig, ExchangeError, ExchangeTimes, Progress};
use crate::ops::OpCount;

/// The emulated trainer's settings.
#[derive(Clone, Debug)]
pub struct EmulatedTrainer {
    /// One accelerator's sustained operations per second.
    pub ops_per_s: f64,
    /// Training and validation images per epoch.
    pub images: (u64, u64),
    /// The exchange.
    pub exchange: ExchangeConfig,
    /// Seed of the synthetic accuracy's noise.
    pub seed: u64,
    /// Steps of each epoch traced (`--trace-steps`).
    pub trace_steps: u32,
}

/// One emulated trial on one rank.
struct EmuRun<'c> {
    /// The group's exchange.
    ex: Exchange<'c>,
    trial: SimTrial,
    steps: u64,
    step_s: f64,
    val_s: f64,
    /// Parameters per layer, in backward order, and the stop flag's 1 element last.
    pieces: Vec<usize>,
    /// A step's forward seconds, then each layer's backward seconds in backward order with
    /// the piece whose gradient it completes, if any.
    forward_s: f64,
    backward: Vec<(f64, Option<usize>)>,
    /// The exchange's buffer (the sums after each step).
    buf: Vec<f32>,
    trace_steps: u32,
}

impl Trainer for EmulatedTrainer {
    fn start<'c>(
        &'c self,
        comm: &'c SimpleCommunicator,
        spec: &TrialSpec,
        _round: u32,
    ) -> Result<Box<dyn TrialRun + 'c>, TrainError> {
        let trial = SimTrial::for_group(spec, comm, self.ops_per_s, self.images, self.seed)?;
        // Collective over the group, like the trial's exchanges.
        let ex = Exchange::new(comm, &self.exchange)?;
        let count = OpCount::of(&spec.graph).map_err(|e| TrainError::Config(e.to_string()))?;
        let steps = trial.steps();
        let rate = self.ops_per_s * f64::from(comm.size());
        let e = trial.epoch(1);
        let mut pieces: Vec<usize> = count
            .layers
            .iter()
            .rev()
            .map(|l| l.params as usize)
            .filter(|&n| n > 0)
            .collect();
        pieces.push(1);
        let total: usize = pieces.iter().sum();
        if i32::try_from(total).is_err() {
            return Err(ExchangeError::TooLarge(total).into());
        }
        let step_s = e.train_ops as f64 / rate / steps as f64;
        let (forward_s, backward) = phases(&count, step_s);
        let mut buf = vec![0.0; total];
        crate::host::advise_huge_pages(buf.as_mut_ptr().cast(), buf.len() * 4);
        Ok(Box::new(EmuRun {
            ex,
            trial,
            steps,
            step_s,
            val_s: e.val_ops as f64 / rate,
            pieces,
            forward_s,
            backward,
            buf,
            trace_steps: self.trace_steps,
        }))
    }

    fn name(&self) -> &'static str {
        "emulated"
    }
}

/// A step's compute split as the operations split: forward, then each layer's backward in
/// backward order (with the parameter piece it completes, if it has parameters); they sum
/// to `step_s` (the optimizer's update is spread over them, in proportion).
fn phases(count: &OpCount, step_s: f64) -> (f64, Vec<(f64, Option<usize>)>) {
    let bp: u64 = count.layers.iter().map(|l| l.bp).sum();
    let total = (count.fp_per_image + bp).max(1) as f64;
    let mut piece = 0;
    let backward = (count.layers.iter().rev())
        .map(|l| {
            let done = (l.params > 0).then(|| {
                piece += 1;
                piece - 1
            });
            (step_s * l.bp as f64 / total, done)
        })
        .collect();
    (step_s * count.fp_per_image as f64 / total, backward)
}

/// Sleeps `seconds` if positive.
fn wait(seconds: f64) {
    if seconds > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(seconds.min(1e6)));
    }
}

impl EmuRun<'_> {
    /// One step's exchange after the step's compute, with `stop` riding along; whether any
    /// rank raised it.
    fn exchange(
        &mut self,
        step: u32,
        stop: bool,
        stats: &mut EpochStats,
    ) -> Result<bool, TrainError> {
        let mut fill = gradients(self.pieces.len() - 1, stop);
        let summed = (self.ex).sum_host(&self.pieces, &mut self.buf, &mut fill, Progress::After);
        self.account(step, &summed.times, summed.waited_s, stats)
    }
}

/// The synthetic gradients' fill: small, finite values (the sums are checked as in
/// training), and the stop flag in the last piece, `flag_piece`.
fn gradients(flag_piece: usize, stop: bool) -> impl FnMut(std::ops::Range<usize>, &mut [f32]) {
    move |pieces, bucket| {
        bucket.fill(1e-3);
        if pieces.end > flag_piece {
            bucket[bucket.len() - 1] = f32::from(u8::from(stop));
        }
    }
}

impl EmuRun<'_> {
    /// One step with the exchange overlapped with backward: forward, then each layer's
    /// backward in turn, each bucket's reduction started (by the exchange's communication thread) once backward has
    /// produced all its gradients (written into the bucket, as gradient views are); the step
    /// then waits for what is still in flight. `owed` is the epoch's compute so far (a
    /// sleep's overshoot is taken off the next wait). Returns whether any rank raised `stop`.
    fn overlapped_step(
        &mut self,
        step: u32,
        stop: bool,
        owed: &mut f64,
        stats: &mut EpochStats,
    ) -> Result<bool, TrainError> {
        let traced = step < self.trace_steps;
        let computing_unix = traced.then(crate::host::unix_s);
        let flag_piece = self.pieces.len() - 1;
        let mut fill = gradients(flag_piece, stop);
        let (forward_s, phases) = (self.forward_s, &self.backward);
        let compute_s = &mut stats.compute_s;
        let mut spend = |seconds: f64| {
            let t = Instant::now();
            *owed += seconds;
            wait(*owed - *compute_s);
            *compute_s += t.elapsed().as_secs_f64();
        };
        let mut backward_end = 0.0;
        // The time the step spends in the gradient reports themselves (filling a bucket,
        // handing it over or starting and testing reductions) holds back the next layer's
        // wait: exchange work on the step's path, booked as exposed exchange.
        let mut in_reports = 0.0;
        let mut backward = |ready: &mut dyn FnMut(usize)| {
            spend(forward_s);
            for &(seconds, piece) in phases {
                spend(seconds);
                if let Some(i) = piece {
                    let t = Instant::now();
                    ready(i);
                    in_reports += t.elapsed().as_secs_f64();
                }
            }
            backward_end = crate::host::unix_s();
        };
        let progress = Progress::During {
            backward: &mut backward,
            // The stop flag is known before backward.
            known: Some(flag_piece),
        };
        let summed = (self.ex).sum_host(&self.pieces, &mut self.buf, &mut fill, progress);
        if let Some(start_s) = computing_unix {
            // Forward and backward: the reductions' spans lie inside it.
            let compute = Span::between(step, SpanKind::Compute, start_s, backward_end);
            stats.spans.push(compute);
        }
        self.account(step, &summed.times, summed.waited_s + in_reports, stats)
    }

    /// Books an exchange's exposed seconds, bytes and spans; whether the flag was raised.
    fn account(
        &mut self,
        step: u32,
        times: &ExchangeTimes,
        exposed_s: f64,
        stats: &mut EpochStats,
    ) -> Result<bool, TrainError> {
        let flag_at = self.buf.len() - 1;
        stats.allreduce_s += exposed_s;
        if step < self.trace_steps {
            stats.spans.extend(exchange_spans(step, &times.buckets));
        }
        if !self.ex.alone() {
            stats.allreduce_bytes += (self.buf.len() * 4) as u64;
        }
        if !self.buf[..flag_at].iter().all(|x| x.is_finite()) {
            stats.non_finite = true;
        }
        Ok(self.buf[flag_at] > 0.5)
    }
}

impl TrialRun for EmuRun<'_> {
    fn epoch(&mut self, epoch: u32, stop: &dyn Fn() -> bool) -> Result<EpochStats, TrainError> {
        let e = self.trial.epoch(epoch);
        let began = Instant::now();
        let mut stats = EpochStats::default();
        // The compute owed so far: a sleep's overshoot is taken off the next step's wait.
        let mut owed = 0.0;
        let overlaps = self.ex.overlaps();
        for step in 0..u32::try_from(self.steps).unwrap_or(u32::MAX) {
            let raised = if overlaps {
                self.overlapped_step(step, stop(), &mut owed, &mut stats)?
            } else {
                let computing = Instant::now();
                let computing_unix = (step < self.trace_steps).then(crate::host::unix_s);
                owed += self.step_s;
                wait(owed - stats.compute_s);
                stats.compute_s += computing.elapsed().as_secs_f64();
                if let Some(t) = computing_unix {
                    stats
                        .spans
                        .push(Span::until_now(step, SpanKind::Compute, t));
                }
                self.exchange(step, stop(), &mut stats)?
            };
            if raised {
                stats.abandoned = true;
                stats.wall_s = began.elapsed().as_secs_f64();
                return Ok(stats);
            }
        }
        let validating = Instant::now();
        wait(owed + self.val_s - stats.compute_s);
        stats.compute_s += validating.elapsed().as_secs_f64();
        Ok(EpochStats {
            figures: self.trial.figures(&e),
            wall_s: began.elapsed().as_secs_f64(),
            ..stats
        })
    }

    /// A hash of the last exchange's sums: every rank must hold the same.
    fn params_hash(&self) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for x in &self.buf {
            x.to_bits().hash(&mut h);
        }
        Some(h.finish())
    }
}
