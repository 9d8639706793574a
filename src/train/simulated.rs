//! The simulated trainer's model of a trial (`--trainer simulated`): no tensors. An epoch
//! takes the time its operations would take at a declared device speed, and the validation
//! accuracy follows a saturating learning curve towards the synthetic accuracy of the
//! architecture and hyperparameters — for protocol tests with many ranks and scale studies.

use std::time::{Duration, Instant};

use aiperf_records::schema::EpochFigures;
use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;
use serde::{Deserialize, Serialize};

use super::{EpochStats, TrainError, Trainer, TrialRun, TrialSpec};
use crate::arch::Graph;
use crate::ops::OpCount;
use crate::search::sim::synthetic_accuracy;
use crate::search::Hparams;

/// A declared accelerator.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimDevice {
    /// Sustained operations per second of one accelerator.
    pub ops_per_s: f64,
    /// Accelerators in the group (the epoch's work is split between them).
    pub accelerators: u32,
}

/// One simulated epoch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimEpoch {
    /// Seconds it takes.
    pub seconds: f64,
    /// Training operations (docs/design.md §4, the same as a real epoch's).
    pub train_ops: u128,
    /// Validation operations.
    pub val_ops: u128,
    /// Validation accuracy after it.
    pub val_accuracy: f64,
    /// Validation loss after it (cross-entropy of a model with that accuracy, roughly).
    pub val_loss: f64,
}

/// Epochs of a trial under the simulation.
#[derive(Clone, Debug)]
pub struct SimTrial {
    count: OpCount,
    device: SimDevice,
    train_images: u64,
    val_images: u64,
    global_batch: u64,
    start: f64,
    limit: f64,
    tau: f64,
}

impl SimTrial {
    /// A trial of `graph` with `h`, on `train_images`/`val_images` per epoch, batches of
    /// `h.batch_size` per accelerator. `seed` varies the synthetic accuracy's noise.
    pub fn new(
        graph: &Graph,
        h: Hparams,
        device: SimDevice,
        train_images: u64,
        val_images: u64,
        seed: u64,
    ) -> Option<SimTrial> {
        let count = OpCount::of(graph).ok()?;
        let classes = f64::from(graph.num_classes().max(2));
        Some(SimTrial {
            count,
            device,
            train_images,
            val_images,
            global_batch: u64::from(h.batch_size.max(1)) * u64::from(device.accelerators.max(1)),
            start: 1.0 / classes,
            limit: synthetic_accuracy(graph, h, seed),
            // Bigger batches take more epochs to converge.
            tau: 2.0 + f64::from(h.batch_size) / 64.0,
        })
    }

    /// A trial of `spec` on the whole group of `comm` (one accelerator per rank), each
    /// accelerator at `ops_per_s`: the simulated and the emulated trainers' model.
    pub fn for_group(
        spec: &TrialSpec,
        comm: &SimpleCommunicator,
        ops_per_s: f64,
        images: (u64, u64),
        seed: u64,
    ) -> Result<SimTrial, TrainError> {
        let device = SimDevice {
            ops_per_s,
            accelerators: u32::try_from(comm.size()).unwrap_or(1),
        };
        SimTrial::new(&spec.graph, spec.hparams, device, images.0, images.1, seed)
            .ok_or_else(|| TrainError::Config("the architecture's shapes do not infer".into()))
    }

    /// Optimizer steps per epoch: the epoch's images in global batches.
    pub fn steps(&self) -> u64 {
        self.train_images.div_ceil(self.global_batch)
    }

    /// Epoch `epoch` (1-based).
    pub fn epoch(&self, epoch: u32) -> SimEpoch {
        let steps = self.steps();
        let train_ops = self.count.train_epoch(self.train_images, steps);
        let val_ops = self.count.eval_epoch(self.val_images);
        let rate = self.device.ops_per_s * f64::from(self.device.accelerators.max(1));
        let acc = self.limit - (self.limit - self.start) * (-f64::from(epoch) / self.tau).exp();
        SimEpoch {
            seconds: (train_ops + val_ops) as f64 / rate,
            train_ops,
            val_ops,
            val_accuracy: acc,
            val_loss: -(acc.clamp(1e-6, 1.0 - 1e-6)).ln(),
        }
    }

    /// The figures an epoch of this trial records, `e` being one of its [`SimTrial::epoch`]s
    /// (the model has no training loss of its own: the validation loss stands for it).
    pub fn figures(&self, e: &SimEpoch) -> EpochFigures {
        EpochFigures {
            train_images: self.train_images,
            steps: self.steps(),
            val_images: self.val_images,
            train_loss: e.val_loss,
            val_loss: e.val_loss,
            val_accuracy: e.val_accuracy,
        }
    }
}

/// The simulated trainer: every rank of a group waits out each epoch's simulated time.
#[derive(Clone, Debug)]
pub struct SimulatedTrainer {
    /// One accelerator's declared speed (`accelerators` is set from the group's size).
    pub device: SimDevice,
    /// Training and validation images per epoch.
    pub images: (u64, u64),
    /// Simulated seconds per wall-clock second.
    pub speedup: f64,
    /// Seed of the synthetic accuracy's noise.
    pub seed: u64,
}

/// The shortest and longest wall time between two stop checks of a simulated epoch: one
/// simulated step, held between these bounds so that short steps do not flood the group
/// with collectives and long ones still see a stop promptly.
const STOP_TICK_S: (f64, f64) = (0.01, 0.05);

struct SimRun<'c> {
    comm: &'c SimpleCommunicator,
    trial: SimTrial,
    steps: u64,
    speedup: f64,
}

impl Trainer for SimulatedTrainer {
    fn start<'c>(
        &'c self,
        comm: &'c SimpleCommunicator,
        spec: &TrialSpec,
        _round: u32,
    ) -> Result<Box<dyn TrialRun + 'c>, TrainError> {
        let trial = SimTrial::for_group(spec, comm, self.device.ops_per_s, self.images, self.seed)?;
        Ok(Box::new(SimRun {
            comm,
            steps: trial.steps(),
            trial,
            speedup: self.speedup,
        }))
    }

    fn name(&self) -> &'static str {
        "simulated"
    }
}

impl SimRun<'_> {
    /// Whether any rank of the group raised its stop flag: every rank calls this at the
    /// same ticks, so the group's members see the leader's stop as the real trainer's do
    /// inside the exchange.
    fn any_stop(&self, mine: bool) -> bool {
        let mut any = 0u8;
        self.comm
            .all_reduce_into(&u8::from(mine), &mut any, SystemOperation::max());
        any != 0
    }
}

impl TrialRun for SimRun<'_> {
    fn epoch(&mut self, epoch: u32, stop: &dyn Fn() -> bool) -> Result<EpochStats, TrainError> {
        let e = self.trial.epoch(epoch);
        let seconds = (e.seconds / self.speedup).min(1e9);
        // The epoch is waited out in ticks of about one step; after each the group agrees
        // on the stop flag. Every rank counts the same ticks (the same epoch time).
        let step = seconds / self.steps.max(1) as f64;
        let tick = step.clamp(STOP_TICK_S.0, STOP_TICK_S.1);
        let ticks = (seconds / tick).ceil().max(1.0) as u64;
        let began = Instant::now();
        for k in 1..=ticks {
            let until = began + Duration::from_secs_f64((k as f64 * tick).min(seconds));
            if let Some(left) = until.checked_duration_since(Instant::now()) {
                std::thread::sleep(left);
            }
            if k < ticks && self.any_stop(stop()) {
                let spent = began.elapsed().as_secs_f64();
                return Ok(EpochStats {
                    compute_s: spent,
                    wall_s: spent,
                    abandoned: true,
                    ..EpochStats::default()
                });
            }
        }
        Ok(EpochStats {
            figures: self.trial.figures(&e),
            compute_s: seconds,
            wall_s: seconds,
            ..EpochStats::default()
        })
    }

    fn params_hash(&self) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{cifar_resnet, CifarResnetConfig, Shape};

    #[test]
    fn epochs_cost_their_operations_and_accuracy_saturates() {
        let g = cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10);
        let h = Hparams {
            batch_size: 64,
            kernel_size: 3,
        };
        let dev = SimDevice {
            ops_per_s: 1e12,
            accelerators: 2,
        };
        let t = SimTrial::new(&g, h, dev, 50_000, 10_000, 1).unwrap();
        let c = OpCount::of(&g).unwrap();
        let e1 = t.epoch(1);
        // 50,000 images in ceil(50,000 / 128) = 391 steps.
        assert_eq!(e1.train_ops, c.train_epoch(50_000, 391));
        assert_eq!(e1.val_ops, c.eval_epoch(10_000));
        assert!((e1.seconds - (e1.train_ops + e1.val_ops) as f64 / 2e12).abs() < 1e-12);
        let accs: Vec<f64> = (1..=40).map(|e| t.epoch(e).val_accuracy).collect();
        assert!(
            accs.windows(2).all(|w| w[1] > w[0]),
            "accuracy rises every epoch"
        );
        assert!(accs[0] > 0.1 && accs[39] < synthetic_accuracy(&g, h, 1) + 1e-12);
        assert!(
            (accs[39] - synthetic_accuracy(&g, h, 1)).abs() < 1e-3,
            "and saturates"
        );
        assert!(t.epoch(2).val_loss < t.epoch(1).val_loss);
    }
}
