//! The flags of `aiperf run`, typed: the preset overrides, the trainer's settings and the
//! run's operational settings. Every value is optional here, so that a resumed run can tell
//! a flag the user gave from a default; [`super::RecordedConfig`] applies them in one step.

// The doc comments of clap's types are the `--help` text, where `<run-id>` is meant
// literally, not as HTML.
#![allow(rustdoc::invalid_html_tags)]

use std::path::PathBuf;

use crate::arch::Shape;
use crate::train::{MemoryFormat, Precision};

use super::TrainerKind;

/// `aiperf run`'s command line.
#[derive(clap::Args, Clone, Debug, Default, PartialEq)]
pub struct RunFlags {
    /// A preset (fashion-mnist, cifar10, imagenet = the official rules) or a preset JSON file
    /// [default: fashion-mnist].
    #[arg(long)]
    pub config: Option<String>,
    /// Print the resolved configuration as a preset JSON file and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Continue a stopped or crashed run from its records folder: its configuration, start
    /// time (the down time counts as wall time), history, search tree, TPE observations and
    /// group rounds; new records are appended. Only --data, --group-size, --threads,
    /// --status-interval, --stall-timeout and --monitor-interval may be given with it; every
    /// other flag is fixed by the records.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Which trainer the replicas use [default: real].
    #[arg(long, value_enum)]
    pub trainer: Option<TrainerKind>,
    /// Run duration in seconds (overrides the preset).
    #[arg(long)]
    pub duration: Option<f64>,
    /// End the run once N epochs have been recorded over all its groups, or at its duration
    /// if that comes first: the same work on a machine of any speed (smoke tests, CI; give a
    /// generous --duration). The run ends early as after a signal, scored over the time it
    /// ran.
    #[arg(long, value_name = "N")]
    pub stop_after_epochs: Option<u64>,
    /// End the run once N trials have ended (trained, failed or stopped) over all its
    /// groups, or at its duration if that comes first, as --stop-after-epochs does.
    #[arg(long, value_name = "N")]
    pub stop_after_trials: Option<u64>,
    /// Full epoch budget; warm-up rounds train 1/4, 1/2, 3/4 of it (overrides the preset).
    #[arg(long)]
    pub epochs: Option<u32>,
    /// Folder with the dataset's train.aipk and val.aipk (default: $AIPERF_DATA/<dataset>,
    /// else data/<dataset>).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Training images per epoch, a fresh random subset each epoch (overrides the preset).
    #[arg(long)]
    pub train_images: Option<usize>,
    /// Validation images (overrides the preset).
    #[arg(long)]
    pub val_images: Option<usize>,
    /// Per-rank batch-size range searched by TPE, MIN:MAX, or one fixed size (overrides the
    /// preset).
    #[arg(long)]
    pub batch_size: Option<String>,
    /// CPU threads per training rank (default: the cores this rank is bound to, as srun
    /// --cpus-per-task or mpirun --map-by …:PE=N bind it; unbound, SLURM_CPUS_PER_TASK in a
    /// SLURM job, else the node's cores shared by its training ranks).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Where the training ranks compute: auto (CUDA when libtorch sees a device), cpu (the
    /// processors, on purpose: also on a node with GPUs) or cuda (an error without one). A
    /// node with GPUs and a libtorch without CUDA is refused unless cpu is given.
    #[arg(long, value_enum, default_value_t = crate::platform::DeviceChoice::Auto)]
    pub device: crate::platform::DeviceChoice,
    /// Arithmetic: auto (measured: a start-up probe times the first architecture's training
    /// step in every precision every training rank computes natively and takes the fastest;
    /// the records hold the choice and the times), fp32, bf16 (autocast in bfloat16: GPUs, and processors with AMX or
    /// AVX-512-BF16 — refused where it would be emulated) or fp16 (CUDA autocast with
    /// dynamic loss scaling) [default: the preset's, auto in the built-in ones].
    #[arg(long, value_enum)]
    pub precision: Option<Precision>,
    /// Memory format of parameters and batches: auto (whichever a start-up probe of the
    /// first architecture measures faster; the records say which), nchw or channels-last
    /// [default: the preset's, auto in the built-in ones].
    #[arg(long, value_enum)]
    pub memory_format: Option<MemoryFormat>,
    /// The gradient exchange's settings.
    #[command(flatten)]
    pub exchange: crate::exchange::ExchangeArgs,
    /// Loader threads per rank (size them per GPU: docs/performance.md, "Data wait under a
    /// fast consumer") [default: the preset's loader_workers].
    #[arg(long, value_name = "N")]
    pub loader_workers: Option<u32>,
    /// Where the loader's augmentation runs: auto (on the GPU when training on CUDA), cpu
    /// (loader threads) or device (resampled, flipped, cast and normalised by libtorch on
    /// the training device) [default: auto].
    #[arg(long, value_enum)]
    pub augment_on: Option<crate::train::AugmentOn>,
    /// Trace the first N steps of every epoch on every rank (data wait, forward+backward,
    /// each bucket's exchange, optimizer) into the records; `aiperf score --trace FILE`
    /// exports them [default: 0, none].
    #[arg(long, value_name = "N")]
    pub trace_steps: Option<u32>,
    /// Ranks per replica group (default: one group per node).
    #[arg(long)]
    pub group_size: Option<usize>,
    /// Records folder (default: results/run-<start time>).
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Start architecture: resnet8, resnet20, resnet18 or resnet50 (overrides the preset).
    #[arg(long)]
    pub start: Option<String>,
    /// Simulated and emulated trainers: input size HxWxC (the real trainer takes it from
    /// the data) [default: 32x32x3].
    #[arg(long)]
    pub input: Option<Shape>,
    /// Simulated and emulated trainers: classes (the real trainer takes them from the data)
    /// [default: 10].
    #[arg(long)]
    pub classes: Option<u32>,
    /// Simulated: sustained operations per second of one accelerator [default: 1e13].
    #[arg(long)]
    pub sim_ops: Option<f64>,
    /// Sustained operations per second of one emulated accelerator (`--trainer emulated`;
    /// recorded as the sim settings' `ops`) [default: 1e13].
    #[arg(long)]
    pub emulated_ops: Option<f64>,
    /// Simulated and emulated trainers: training images per epoch [default: 50000].
    #[arg(long)]
    pub sim_train_images: Option<u64>,
    /// Simulated and emulated trainers: validation images per epoch [default: 10000].
    #[arg(long)]
    pub sim_val_images: Option<u64>,
    /// Simulated seconds per wall-clock second [default: 100].
    #[arg(long)]
    pub speedup: Option<f64>,
    /// Step of the score's timeline in the final report, seconds (overrides the preset).
    #[arg(long)]
    pub score_interval: Option<f64>,
    /// Seed [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Threads of each leader's search pool [default: 1].
    #[arg(long)]
    pub search_threads: Option<usize>,
    /// Seconds between rank 0's status lines (elapsed, trials, OPS, best accuracy); one more
    /// ends the run [default: 60].
    #[arg(long)]
    pub status_interval: Option<f64>,
    /// Seconds a group may stay silent (no epoch, no request) before the run is stopped and
    /// the group reported as stalled; longer than the slowest epoch [default: 7200].
    #[arg(long)]
    pub stall_timeout: Option<f64>,
    /// Seconds between resource samples (CPU, host memory, accelerators) in the records
    /// [default: 30].
    #[arg(long)]
    pub monitor_interval: Option<f64>,
    /// Test double: inject a fault (hang:GROUP, panic:RANK, nan:ROUND, nan:all). For the project's
    /// tests only; a run with a fault is never VALID.
    #[arg(long, hide = true)]
    pub fault: Option<crate::train::fault::Fault>,
}

impl RunFlags {
    /// The flags a resumed run may not give, because its records fix them: their names as
    /// the user typed them.
    pub fn fixed_by_records(&self) -> Vec<&'static str> {
        let set = |flags: &[(&'static str, bool)]| -> Vec<&'static str> {
            let given = flags.iter().filter(|(_, set)| *set);
            given.map(|(name, _)| *name).collect()
        };
        let mut given = set(&[
            ("--config", self.config.is_some()),
            ("--trainer", self.trainer.is_some()),
            ("--duration", self.duration.is_some()),
            ("--stop-after-epochs", self.stop_after_epochs.is_some()),
            ("--stop-after-trials", self.stop_after_trials.is_some()),
            ("--epochs", self.epochs.is_some()),
            ("--train-images", self.train_images.is_some()),
            ("--val-images", self.val_images.is_some()),
            ("--batch-size", self.batch_size.is_some()),
            ("--precision", self.precision.is_some()),
            ("--memory-format", self.memory_format.is_some()),
        ]);
        given.extend(self.exchange.given());
        given.extend(set(&[
            ("--augment-on", self.augment_on.is_some()),
            ("--loader-workers", self.loader_workers.is_some()),
            ("--trace-steps", self.trace_steps.is_some()),
            ("--results", self.results.is_some()),
            ("--start", self.start.is_some()),
            ("--input", self.input.is_some()),
            ("--classes", self.classes.is_some()),
            ("--sim-ops", self.sim_ops.is_some()),
            ("--emulated-ops", self.emulated_ops.is_some()),
            ("--sim-train-images", self.sim_train_images.is_some()),
            ("--sim-val-images", self.sim_val_images.is_some()),
            ("--speedup", self.speedup.is_some()),
            ("--score-interval", self.score_interval.is_some()),
            ("--seed", self.seed.is_some()),
            ("--search-threads", self.search_threads.is_some()),
            ("--print-config", self.print_config),
            ("--fault", self.fault.is_some()),
        ]));
        given
    }
}

/// Parses `--batch-size`: `MIN:MAX` or one size.
pub fn parse_batch_size(text: &str) -> Result<(u32, u32), String> {
    let parse = |v: &str| {
        let v = v.trim();
        v.parse::<u32>().map_err(|_| {
            if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
                // A whole number, too large: name it and the limit.
                format!(
                    "--batch-size {text:?}: {v} is too large (at most {})",
                    crate::config::MAX_BATCH
                )
            } else {
                format!("--batch-size {text:?}: expected MIN:MAX or one size, e.g. 32:128 or 64")
            }
        })
    };
    match text.split_once(':') {
        Some((lo, hi)) => Ok((parse(lo)?, parse(hi)?)),
        None => {
            let b = parse(text)?;
            Ok((b, b))
        }
    }
}
