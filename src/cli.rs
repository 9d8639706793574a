//! The command line: clap's types for every subcommand, and the range checks of their
//! flags (done before any I/O; each error names its flag). `aiperf run`'s flags are
//! [`crate::config::RunFlags`].

// The doc comments of clap's types are the `--help` text, where `<run-id>` is meant
// literally, not as HTML.
#![allow(rustdoc::invalid_html_tags)]

use std::path::PathBuf;

use aiperf_records::audit::{DEFAULT_ALPHA, DEFAULT_EPOCHS, DEFAULT_SEEDS, DEFAULT_TRIALS};
use anyhow::bail;
use clap::{Parser, Subcommand};

use crate::arch::Shape;
use crate::config::RunFlags;
use crate::data::Augment;

/// AIPerf: an AutoML benchmark for AI supercomputers.
#[derive(Parser, Debug)]
#[command(name = "aiperf", about)]
pub struct Cli {
    #[command(subcommand)]
    /// The subcommand.
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Report what this build and machine provide (libtorch, CUDA, MPI, HDF5), per rank.
    Doctor(DoctorArgs),
    /// Check a prepared dataset: verify its checksum, run the loader over it, report
    /// throughput and the statistics of the normalised tensors.
    DataCheck(DataCheckArgs),
    /// Count the operations of an architecture per layer (docs/design.md §4): a built-in
    /// (resnet50, resnet20, resnet18, resnet8) or an IR JSON file.
    Ops(OpsArgs),
    /// Run the architecture search and TPE against a synthetic accuracy model (no training)
    /// and print the trajectory.
    SearchSim(SearchSimArgs),
    /// Check data-parallel training under MPI: every rank trains a tiny model on its shard
    /// with gradient exchange, and all must keep bit-identical parameters.
    DpCheck(DpCheckArgs),
    /// The benchmark under MPI: rank 0 the primary, the other ranks replica groups that
    /// search architectures and train them data-parallel; prints the score at the end.
    Run(Box<RunFlags>),
    /// Profile the interconnect: all-reduce and the training's gradient exchange over a sweep
    /// of sizes, over the whole world and within groups (algorithm and bus bandwidth; each
    /// time the median of the operations' slowest-rank times, and a `control` row that times
    /// the in-place call again to show the bench's own resolution).
    CommBench(CommBenchArgs),
    /// Score runs from their HDF5 records (docs/design.md §5); the same as `aiperf-score`.
    Score(aiperf_records::cli::ScoreArgs),
    /// The residual check, under MPI like the run: re-train a sample of the recorded trials
    /// (drawn from the run digest) and compare every epoch with its record; writes audit.h5.
    Audit(AuditArgs),
}

/// `aiperf doctor`'s flags.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// One JSON object per rank instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The device examined, as `aiperf run --device` takes it: auto (CUDA when libtorch sees
    /// a device), cpu (the processors, on purpose: a node with GPUs and a CPU-only libtorch
    /// is then not an error) or cuda.
    #[arg(long, value_enum, default_value_t = crate::platform::DeviceChoice::Auto)]
    pub device: crate::platform::DeviceChoice,
}

/// `aiperf dp-check`'s flags.
#[derive(clap::Args, Debug)]
pub struct DpCheckArgs {
    /// SGD steps.
    #[arg(long, default_value_t = 6)]
    pub steps: u32,
    /// Batch norm on running statistics: the update must then equal one process's.
    #[arg(long)]
    pub frozen_bn: bool,
    /// The exchange checked, as `aiperf run` takes it (small buckets check many reductions
    /// per step; the report says which exchange ran and what `auto` measured).
    #[command(flatten)]
    pub exchange: crate::exchange::ExchangeArgs,
    /// The device each rank trains on: cuda takes CUDA device (node-local rank mod the
    /// node's devices), so ranks may share one; auto takes CUDA when libtorch sees one.
    #[arg(long, value_enum, default_value = "auto")]
    pub device: crate::platform::DeviceChoice,
}

/// `aiperf comm-bench`'s flags.
#[derive(clap::Args, Debug)]
pub struct CommBenchArgs {
    /// Smallest message, bytes.
    #[arg(long, default_value_t = 1024)]
    pub min_bytes: u64,
    /// Largest message, bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_bytes: u64,
    /// Timed operations per size and method (the time reported is their median); a
    /// multiple of 6 gives every method every place in the turn order equally often.
    #[arg(long, default_value_t = 18)]
    pub iters: usize,
    /// Untimed operations per size first.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Also sweep within groups of this many consecutive ranks.
    #[arg(long)]
    pub group_size: Option<usize>,
    /// One JSON object per row instead of tables.
    #[arg(long)]
    pub json: bool,
    /// The exchange's flags, as `aiperf run` takes them: comm-bench times both methods
    /// after backward from host memory, so only `--bucket-bytes` applies.
    #[command(flatten)]
    pub exchange: crate::exchange::ExchangeArgs,
}

/// `aiperf search-sim`'s flags.
#[derive(clap::Args, Debug)]
pub struct SearchSimArgs {
    /// Start architecture: resnet8, resnet20, resnet18 or resnet50.
    #[arg(long, default_value = "resnet20")]
    pub start: String,
    /// Input size HxWxC.
    #[arg(long, default_value = "32x32x3")]
    pub input: Shape,
    /// Number of classes.
    #[arg(long, default_value_t = 10)]
    pub classes: u32,
    /// Trials to simulate.
    #[arg(long, default_value_t = 30)]
    pub trials: u64,
    /// Threads of the search's rayon pool.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seed of the search, TPE and the synthetic model.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// One JSON object per trial instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `aiperf ops`'s flags.
#[derive(clap::Args, Debug)]
pub struct OpsArgs {
    /// resnet50, resnet20, resnet18, resnet8, or a path to an architecture JSON file.
    #[arg(long)]
    pub arch: String,
    /// Input size HxWxC for a built-in architecture (default 224x224x3).
    #[arg(long)]
    pub input: Option<Shape>,
    /// Number of classes for a built-in architecture (default 1000).
    #[arg(long)]
    pub classes: Option<u32>,
    /// Print JSON (per-layer counts and totals) instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `aiperf data-check`'s flags.
#[derive(clap::Args, Debug)]
pub struct DataCheckArgs {
    /// Folder holding train.aipk / val.aipk (from aiperf-data-prep).
    #[arg(long)]
    pub data: PathBuf,
    /// Split to load: train or val.
    #[arg(long, default_value = "train", value_parser = ["train", "val"])]
    pub split: String,
    /// Global batch size.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Loader worker threads.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// none, crop-flip:PAD, random-resized-crop:SIZE or center-crop:SIZE.
    #[arg(long, default_value = "none")]
    pub augment: Augment,
    /// Epochs to run.
    #[arg(long, default_value_t = 1)]
    pub epochs: u64,
    /// Shuffle seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where the augmentation runs: cpu (the loader threads) or device (libtorch on
    /// --device; on the CPU, what a GPU would run) [auto: on a CUDA --device, else cpu].
    #[arg(long, value_enum, default_value = "auto")]
    pub augment_on: crate::train::AugmentOn,
    /// Where the batches are delivered (as training receives them): cuda, cpu, or auto (CUDA
    /// when libtorch sees a device).
    #[arg(long, value_enum, default_value = "auto")]
    pub device: crate::platform::DeviceChoice,
}

/// A flag outside its range: the flag, its value and the range allowed.
fn range<T: PartialOrd + std::fmt::Display>(flag: &str, v: T, lo: T, hi: T) -> anyhow::Result<()> {
    if lo <= v && v <= hi {
        Ok(())
    } else {
        anyhow::bail!("{flag} must be in {lo}..={hi}, got {v}")
    }
}

/// The largest message `comm-bench` sweeps to (its buffers are allocated whole).
pub const MAX_COMM_BYTES: u64 = 1 << 30;

impl CommBenchArgs {
    /// The sweep's sizes: the powers of two from `--min-bytes` to `--max-bytes` (at least 4
    /// bytes, one `f32`).
    pub fn sizes(&self) -> Vec<u64> {
        powers_of_two(self.min_bytes, self.max_bytes)
    }

    /// The exchange the `exchange`, `exchange-copy` and `hierarchical` methods time (after
    /// [`Self::validate`]).
    pub fn exchange_config(&self) -> crate::exchange::ExchangeConfig {
        self.exchange.config().unwrap_or_default()
    }

    /// Checks every flag's range.
    pub fn validate(&self) -> anyhow::Result<()> {
        range("--max-bytes", self.max_bytes, 1, MAX_COMM_BYTES)?;
        range("--min-bytes", self.min_bytes, 1, self.max_bytes)?;
        if self.sizes().is_empty() {
            anyhow::bail!(
                "--min-bytes {} --max-bytes {}: no power of two of at least 4 bytes lies in this range, so nothing would be measured; widen it (e.g. --min-bytes 4)",
                self.min_bytes,
                self.max_bytes
            );
        }
        range("--iters", self.iters, 1, 1_000_000)?;
        if let Some(flag) = self.exchange.beyond_buckets() {
            anyhow::bail!(
                "{flag} does not apply to comm-bench, which times the flat and the node-aware exchange after backward from host memory; give --bucket-bytes alone"
            );
        }
        self.exchange.config()?;
        range("--warmup", self.warmup, 0, 1_000_000)?;
        if let Some(g) = self.group_size {
            range("--group-size", g, 1, 1 << 20)?;
        }
        Ok(())
    }
}

impl SearchSimArgs {
    /// Checks every flag's range.
    pub fn validate(&self) -> anyhow::Result<()> {
        range("--trials", self.trials, 1, 1_000_000)?;
        range("--threads", self.threads, 1, crate::config::MAX_THREADS)?;
        range("--classes", self.classes, 1, 1 << 20)
    }
}

impl DataCheckArgs {
    /// Checks every flag's range.
    pub fn validate(&self) -> anyhow::Result<()> {
        range("--batch", self.batch, 1, 1 << 24)?;
        range("--workers", self.workers, 1, 1024)?;
        range("--epochs", self.epochs, 1, 1_000_000)?;
        self.augment
            .check_params()
            .map_err(|e| anyhow::anyhow!("--augment: {e}"))
    }
}

impl DpCheckArgs {
    /// Checks every flag's range.
    pub fn validate(&self) -> anyhow::Result<()> {
        range("--steps", self.steps, 1, 100_000)?;
        self.exchange.config()?;
        Ok(())
    }
}

impl OpsArgs {
    /// Checks every flag's range.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(c) = self.classes {
            range("--classes", c, 1, 1 << 24)?;
        }
        Ok(())
    }
}

/// `aiperf --version`, line by line: version, commit, libtorch (version, the folder loaded,
/// CUDA), MPI, HDF5, and this machine's platform fingerprint as a run records it
/// (docs/design.md §6; with libtorch's default thread count), as one line of JSON.
pub fn long_version() -> String {
    use crate::version::{hdf5, mpi_library, COMMIT, LIBTORCH_VERSION, VERSION};
    let libtorch_dir =
        crate::host::loaded_libtorch().unwrap_or_else(|| crate::platform::LIBTORCH_LIB.into());
    let cuda = if tch::Cuda::is_available() {
        format!("CUDA, {} device(s)", tch::Cuda::device_count())
    } else {
        "no CUDA device".into()
    };
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
    let fingerprint = crate::fingerprint::this_rank(threads);
    format!(
        "{VERSION}\ncommit {COMMIT}\nlibtorch {LIBTORCH_VERSION} ({libtorch_dir}; {cuda})\nMPI {}\nHDF5 {}\nplatform {}\nfingerprint {}",
        mpi_library(),
        hdf5(),
        fingerprint.summary(),
        serde_json::to_string(&fingerprint).expect("plain data")
    )
}

/// How the audit may compare (`--mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeChoice {
    /// Exact where the platform, rank count and threads are the run's, else statistical.
    Auto,
    /// Statistical even where exactness is possible (to measure the spread on site).
    Statistical,
}

/// `aiperf audit`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct AuditArgs {
    /// The run's records folder (results/<run-id>/); audit.h5 is written there.
    pub dir: PathBuf,
    /// Trials to draw (the sample; the trial with the best accuracy is always added; more
    /// than the run has takes them all).
    #[arg(long, default_value_t = DEFAULT_TRIALS)]
    pub trials: usize,
    /// Epochs of each drawn trial to re-train and compare (at most its recorded epochs; the
    /// best trial up to the epoch that reached its accuracy, or K if later).
    #[arg(long, default_value_t = DEFAULT_EPOCHS)]
    pub epochs: u32,
    /// The dataset's folder (default: the one the run recorded, else $AIPERF_DATA/<dataset>).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// CPU threads per rank (default: the run's, from its recorded devices).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Exact where possible (auto), or statistical regardless.
    #[arg(long, value_enum, default_value_t = ModeChoice::Auto)]
    pub mode: ModeChoice,
    /// Re-trainings per sampled epoch in statistical mode (the recorded seed and S − 1
    /// more), and with --timed the repeats of the recorded seed.
    #[arg(long, default_value_t = DEFAULT_SEEDS)]
    pub seeds: u32,
    /// Family-wise false-alarm rate of the statistical mode (Bonferroni over every value
    /// compared).
    #[arg(long, default_value_t = DEFAULT_ALPHA)]
    pub alpha: f64,
    /// The draw (16 hex digits) that chooses the sample with the run digest; default: fresh
    /// randomness. Give the one an audit printed to repeat its sample.
    #[arg(long, value_parser = parse_draw)]
    pub draw: Option<u64>,
    /// Also compare each epoch's time with the recorded one (exact mode only: on the run's
    /// own machine), confirming the throughput on site.
    #[arg(long)]
    pub timed: bool,
}

/// `--draw`: 1 to 16 hex digits, an optional `0x` before them.
fn parse_draw(s: &str) -> Result<u64, String> {
    let digits = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(digits, 16).map_err(|e| {
        format!("{s:?} is not 1 to 16 hex digits ({e}): give the draw an audit printed")
    })
}

impl AuditArgs {
    /// Range checks, before any I/O.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.trials == 0 || self.trials > 10_000 {
            bail!("--trials {}: re-train 1 to 10000 trials", self.trials);
        }
        if self.epochs == 0 || self.epochs > 10_000 {
            bail!(
                "--epochs {}: re-train 1 to 10000 epochs per trial",
                self.epochs
            );
        }
        if self.threads.is_some_and(|t| t == 0 || t > 1024) {
            bail!("--threads: 1 to 1024 per rank");
        }
        if !(2..=64).contains(&self.seeds) {
            bail!(
                "--seeds {}: 2 to 64 re-trainings per epoch (a spread needs two)",
                self.seeds
            );
        }
        if !(self.alpha > 0.0 && self.alpha < 0.5) {
            bail!(
                "--alpha {}: a false-alarm rate between 0 and 0.5 (default {DEFAULT_ALPHA})",
                self.alpha
            );
        }
        if self.timed && self.mode == ModeChoice::Statistical {
            bail!("--timed compares epoch times on the run's own platform: it needs the exact mode, not --mode statistical");
        }
        Ok(())
    }
}

/// The powers of two from `min` (rounded up, at least 4) to `max`.
fn powers_of_two(min: u64, max: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut s = min.max(4).next_power_of_two();
    while s <= max {
        out.push(s);
        s *= 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::powers_of_two;

    #[test]
    fn comm_bench_sizes_are_powers_of_two_within_the_range() {
        assert_eq!(powers_of_two(1000, 9000), vec![1024, 2048, 4096, 8192]);
        assert_eq!(powers_of_two(1, 4), vec![4]);
        assert!(powers_of_two(9000, 1000).is_empty());
    }
}
