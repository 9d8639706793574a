//! The `aiperf` command line: parses arguments and dispatches into the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use aiperf::arch::{self, Graph, Shape};
use aiperf::data::{open_split, Augment, Loader, LoaderConfig};
use aiperf::ops::OpCount;
use aiperf::platform::Platform;
use aiperf::preset::Preset;
use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use mpi::traits::Communicator;

/// AIPerf: an AutoML benchmark for AI supercomputers.
#[derive(Parser, Debug)]
#[command(name = "aiperf", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Report what this build and machine provide (libtorch, CUDA, MPI, HDF5), per rank.
    Doctor {
        /// One JSON object per rank instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check a prepared dataset: verify its checksum, run the loader over it, report
    /// throughput and the statistics of the normalised tensors.
    DataCheck(DataCheckArgs),
    /// Count the operations of an architecture per layer (DESIGN.md §4): a built-in
    /// (resnet50, resnet20, resnet18) or an IR JSON file.
    Ops(OpsArgs),
    /// Run the architecture search and TPE against a synthetic accuracy model (no training)
    /// and print the trajectory.
    SearchSim(SearchSimArgs),
    /// Check data-parallel training under MPI: every rank trains a tiny model on its shard
    /// with gradient exchange, and all must keep bit-identical parameters.
    DpCheck {
        /// SGD steps.
        #[arg(long, default_value_t = 6)]
        steps: u32,
        /// Batch norm on running statistics: the update must then equal one process's.
        #[arg(long)]
        frozen_bn: bool,
    },
    /// The benchmark under MPI: rank 0 the primary, the other ranks replica groups that
    /// search architectures and train them data-parallel; prints the score at the end.
    Run(Box<RunArgs>),
    /// Profile the interconnect: all-reduce and the training's gradient exchange over a sweep
    /// of sizes, over the whole world and within groups (algorithm and bus bandwidth).
    CommBench(CommBenchArgs),
    /// Score runs from their HDF5 records (DESIGN.md §5); the same as `aiperf-score`.
    Score(aiperf_records::cli::ScoreArgs),
}

/// The trainer of `aiperf run`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Trainer {
    /// libtorch: real training, data-parallel within each group.
    Real,
    /// No tensors: epoch time from the op count and --sim-ops, accuracy from a learning curve.
    Simulated,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// A preset (fashion-mnist, cifar10, imagenet = the official rules) or a preset JSON file.
    #[arg(long, default_value = "fashion-mnist")]
    config: String,
    /// Print the resolved configuration as a preset JSON file and exit.
    #[arg(long)]
    print_config: bool,
    /// Continue a stopped or crashed run from its records folder: its configuration, start
    /// time (the down time counts as wall time), history, search tree, TPE observations and
    /// group rounds; new records are appended. Layout flags (--group-size, --threads) and
    /// --data may differ from the first run's.
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// Which trainer the replicas use.
    #[arg(long, value_enum, default_value = "real")]
    trainer: Trainer,
    /// Run duration in seconds (overrides the preset).
    #[arg(long)]
    duration: Option<f64>,
    /// Full epoch budget; warm-up rounds train 1/4, 1/2, 3/4 of it (overrides the preset).
    #[arg(long)]
    epochs: Option<u32>,
    /// Folder with the dataset's train.aipk and val.aipk (default: $AIPERF_DATA/<dataset>,
    /// else data/<dataset>).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Training images per epoch, a fresh random subset each epoch (overrides the preset).
    #[arg(long)]
    train_images: Option<usize>,
    /// Validation images (overrides the preset).
    #[arg(long)]
    val_images: Option<usize>,
    /// Per-rank batch-size range searched by TPE, MIN:MAX or one fixed size.
    #[arg(long)]
    batch_size: Option<String>,
    /// CPU threads per training rank (default: the node's cores shared by its training ranks).
    #[arg(long)]
    threads: Option<usize>,
    /// Arithmetic: fp32, or fp16 (CUDA autocast).
    #[arg(long, value_enum)]
    precision: Option<aiperf::train::Precision>,
    /// Ranks per replica group (default: one group per node).
    #[arg(long)]
    group_size: Option<usize>,
    /// Records folder (default: results/run-<start time>).
    #[arg(long)]
    results: Option<PathBuf>,
    /// Start architecture: resnet8, resnet20, resnet18 or resnet50 (overrides the preset).
    #[arg(long)]
    start: Option<String>,
    /// Simulated: input size HxWxC (the real trainer takes it from the data).
    #[arg(long)]
    input: Option<Shape>,
    /// Simulated: classes (the real trainer takes them from the data).
    #[arg(long)]
    classes: Option<u32>,
    /// Simulated: sustained operations per second of one accelerator.
    #[arg(long, default_value_t = 1e13)]
    sim_ops: f64,
    /// Simulated: training images per epoch.
    #[arg(long, default_value_t = 50_000)]
    sim_train_images: u64,
    /// Simulated: validation images per epoch.
    #[arg(long, default_value_t = 10_000)]
    sim_val_images: u64,
    /// Simulated seconds per wall-clock second.
    #[arg(long, default_value_t = 100.0)]
    speedup: f64,
    /// Step of the score's timeline in the final report, seconds (overrides the preset).
    #[arg(long)]
    score_interval: Option<f64>,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Threads of each leader's search pool.
    #[arg(long, default_value_t = 1)]
    search_threads: usize,
    /// Seconds between rank 0's status lines (elapsed, trials, OPS, best accuracy).
    #[arg(long, default_value_t = 60.0)]
    status_interval: f64,
    /// Seconds a group may stay silent (no epoch, no request) before the run is stopped and
    /// the group reported as stalled; longer than the slowest epoch.
    #[arg(long, default_value_t = 7200.0)]
    stall_timeout: f64,
    /// Seconds between resource samples (CPU, host memory, accelerators) in the records.
    #[arg(long, default_value_t = 30.0)]
    monitor_interval: f64,
}

#[derive(clap::Args, Debug)]
struct CommBenchArgs {
    /// Smallest message, bytes.
    #[arg(long, default_value_t = 1024)]
    min_bytes: u64,
    /// Largest message, bytes.
    #[arg(long, default_value_t = 64 << 20)]
    max_bytes: u64,
    /// Timed operations per size.
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Untimed operations per size first.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Also sweep within groups of this many consecutive ranks.
    #[arg(long)]
    group_size: Option<usize>,
    /// One JSON object per row instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct SearchSimArgs {
    /// Start architecture: resnet20, resnet18 or resnet50.
    #[arg(long, default_value = "resnet20")]
    start: String,
    /// Input size HxWxC.
    #[arg(long, default_value = "32x32x3")]
    input: Shape,
    /// Number of classes.
    #[arg(long, default_value_t = 10)]
    classes: u32,
    /// Trials to simulate.
    #[arg(long, default_value_t = 30)]
    trials: u64,
    /// Threads of the search's rayon pool.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Seed of the search, TPE and the synthetic model.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// One JSON object per trial instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct OpsArgs {
    /// resnet50, resnet20, resnet18, or a path to an architecture JSON file.
    #[arg(long)]
    arch: String,
    /// Input size HxWxC for a built-in architecture (default 224x224x3).
    #[arg(long)]
    input: Option<Shape>,
    /// Number of classes for a built-in architecture (default 1000).
    #[arg(long)]
    classes: Option<u32>,
    /// Print JSON (per-layer counts and totals) instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct DataCheckArgs {
    /// Folder holding train.aipk / val.aipk (from aiperf-data-prep).
    #[arg(long)]
    data: PathBuf,
    /// Split to load.
    #[arg(long, default_value = "train")]
    split: String,
    /// Global batch size.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Loader worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// none, crop-flip:PAD, random-resized-crop:SIZE or center-crop:SIZE.
    #[arg(long, default_value = "none")]
    augment: Augment,
    /// Epochs to run.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Shuffle seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn doctor(json: bool) -> anyhow::Result<()> {
    let Some(universe) = mpi::initialize() else {
        bail!("MPI was already initialised");
    };
    let world = universe.world();
    let library = mpi::environment::library_version().unwrap_or_else(|_| "unknown".into());
    // OpenMPI: "Open MPI v4.1.4, package: ..., ident: ..."; keep the name and version.
    let library = library
        .split([',', '\n'])
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let p = Platform::probe(library, world.size(), world.rank());
    if json {
        println!("{}", serde_json::to_string(&p)?);
    } else {
        println!(
            "rank {}/{} on {} ({} cpus): aiperf {}, libtorch {} (cuda: {}, {} device(s), {} threads), MPI {}, HDF5 {}",
            p.mpi_rank,
            p.mpi_world_size,
            p.host,
            p.cpus,
            p.aiperf_version,
            p.libtorch_lib,
            p.cuda_available,
            p.cuda_devices,
            p.torch_threads,
            p.mpi_library,
            p.hdf5_version
        );
    }
    Ok(())
}

/// The preset with this command line's overrides applied.
fn resolve_preset(a: &RunArgs) -> anyhow::Result<Preset> {
    let mut p = Preset::load(&a.config).map_err(anyhow::Error::msg)?;
    if let Some(d) = a.duration {
        p.duration_s = d;
    }
    if let Some(e) = a.epochs {
        p.epochs = e;
    }
    if let Some(s) = &a.start {
        p.start.clone_from(s);
    }
    if let Some(n) = a.train_images {
        p.train.train_images = Some(n);
    }
    if let Some(n) = a.val_images {
        p.train.val_images = Some(n);
    }
    if let Some(b) = &a.batch_size {
        let parse = |v: &str| {
            v.trim().parse::<u32>().map_err(|_| {
                anyhow::anyhow!("--batch-size {b:?}: expected MIN:MAX or one size, e.g. 32:128")
            })
        };
        p.batch_size = match b.split_once(':') {
            Some((lo, hi)) => (parse(lo)?, parse(hi)?),
            None => (parse(b)?, parse(b)?),
        };
    }
    if let Some(x) = a.precision {
        p.train.precision = x;
    }
    if let Some(i) = a.score_interval {
        p.score_interval_s = i;
    }
    p.validate()
        .map_err(|e| anyhow::anyhow!("{e} (after the command-line overrides)"))?;
    if !(a.speedup > 0.0 && a.sim_ops > 0.0) {
        bail!("--speedup and --sim-ops must be positive");
    }
    if !(a.status_interval > 0.0 && a.monitor_interval > 0.0 && a.stall_timeout > 0.0) {
        bail!(
            "--status-interval, --monitor-interval and --stall-timeout must be positive (seconds)"
        );
    }
    Ok(p)
}

/// Takes a recorded run's settings (`config` attribute of its primary.h5) into `a` for
/// `--resume`: trainer, seed, search threads, simulated-trainer settings, and the data
/// folder and group size unless given on the command line; returns its preset.
fn adopt_saved_config(a: &mut RunArgs, config: &str) -> anyhow::Result<Preset> {
    let v: serde_json::Value = serde_json::from_str(config)?;
    let preset: Preset = serde_json::from_value(v["preset"].clone())
        .context("no complete \"preset\" in it (written by an older aiperf?)")?;
    a.trainer = match v["trainer"].as_str() {
        Some("real") => Trainer::Real,
        Some("simulated") => Trainer::Simulated,
        other => bail!("unknown trainer {other:?}"),
    };
    let num = |x: &serde_json::Value, what: &str| {
        x.as_f64().ok_or_else(|| anyhow::anyhow!("missing {what}"))
    };
    a.seed = v["seed"].as_u64().context("missing seed")?;
    a.search_threads = v["search_threads"]
        .as_u64()
        .context("missing search_threads")? as usize;
    let sim = &v["sim"];
    a.sim_ops = num(&sim["ops"], "sim.ops")?;
    a.sim_train_images = num(&sim["train_images"], "sim.train_images")? as u64;
    a.sim_val_images = num(&sim["val_images"], "sim.val_images")? as u64;
    a.speedup = num(&sim["speedup"], "sim.speedup")?;
    a.input = match sim["input"].as_str() {
        Some(s) => Some(s.parse().map_err(anyhow::Error::msg)?),
        None => None,
    };
    a.classes = sim["classes"].as_u64().map(|c| c as u32);
    if a.data.is_none() {
        a.data = v["data"].as_str().map(PathBuf::from);
    }
    if a.group_size.is_none() {
        a.group_size = v["group_size"].as_u64().map(|g| g as usize);
    }
    preset.validate().map_err(anyhow::Error::msg)?;
    Ok(preset)
}

/// Fixed-size, zero-padded bytes of a short string, for gathering over MPI.
fn padded(s: &str) -> [u8; 64] {
    let mut out = [0u8; 64];
    let b = s.as_bytes();
    out[..b.len().min(64)].copy_from_slice(&b[..b.len().min(64)]);
    out
}

fn unpadded(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .trim_end_matches('\0')
        .to_string()
}

/// Collective: every rank's outcome of a set-up step; if any failed, each failing rank
/// names its error and all return an error (so no rank waits for a collective forever).
fn agree<C: Communicator>(world: &C, mine: anyhow::Result<()>) -> anyhow::Result<()> {
    use mpi::collective::{CommunicatorCollectives, SystemOperation};
    let ok = i32::from(mine.is_ok());
    let mut all = 0i32;
    world.all_reduce_into(&ok, &mut all, SystemOperation::min());
    match mine {
        Err(e) => Err(e.context(format!("rank {}", world.rank()))),
        Ok(()) if all == 0 => bail!("another rank failed to set up (see its message)"),
        Ok(()) => Ok(()),
    }
}

fn run_benchmark(a: RunArgs) -> anyhow::Result<()> {
    use aiperf::cluster::{clock, layout, run};
    use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
    use mpi::topology::Color;
    let mut a = a;
    let mut preset = if a.resume.is_some() {
        None
    } else {
        Some(resolve_preset(&a)?)
    };
    if a.print_config {
        let p = preset
            .ok_or_else(|| anyhow::anyhow!("--print-config does not combine with --resume"))?;
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(());
    }
    let Some(universe) = mpi::initialize() else {
        bail!("MPI was already initialised");
    };
    let world = universe.world();
    let rank = world.rank() as usize;
    // Resume: rank 0 reads the stopped run's configuration and start, every rank adopts them.
    let mut resumed_t0 = None;
    let mut resumed_groups = None;
    if let Some(dir) = a.resume.clone() {
        type Saved = (String, f64, u32, u32);
        let mine: Option<Result<Saved, String>> = (rank == 0).then(|| {
            aiperf_records::read_config(&dir)
                .and_then(|c| {
                    let i = aiperf_records::read_run(&dir)?.info;
                    Ok((c, i.start_time_s, i.world_size, i.groups))
                })
                .map_err(|e| format!("--resume {}: {e}", dir.display()))
        });
        let saved: Result<Saved, String> =
            aiperf::cluster::run::broadcast_value(&world, mine.as_ref())
                .map_err(anyhow::Error::msg)?;
        let (config, t0, world_size, groups) = saved.map_err(anyhow::Error::msg)?;
        if world_size != world.size() as u32 {
            bail!(
                "--resume {}: the run had {world_size} ranks; resume it with the same number (here {})",
                dir.display(),
                world.size()
            );
        }
        resumed_groups = Some(groups);
        let p = adopt_saved_config(&mut a, &config)
            .with_context(|| format!("--resume {}: its recorded configuration", dir.display()))?;
        preset = Some(p);
        resumed_t0 = Some(t0);
        a.results = Some(dir);
    }
    let preset = preset.expect("resolved above");
    // Node of every rank: the lowest world rank sharing its memory.
    let node = world.split_shared(0);
    let mut lowest = 0i32;
    node.all_reduce_into(&world.rank(), &mut lowest, SystemOperation::min());
    let mut nodes = vec![0i32; world.size() as usize];
    world.all_gather_into(&lowest, &mut nodes[..]);
    let nodes: Vec<u64> = nodes.iter().map(|&n| n as u64).collect();
    let layout = layout::layout(&nodes, a.group_size).map_err(anyhow::Error::msg)?;
    if let Some(g) = resumed_groups {
        if layout.groups() != g {
            bail!(
                "--resume: the run had {g} groups, this layout makes {}: use the first run's --group-size (recorded in its config)",
                layout.groups()
            );
        }
    }
    // This rank's place among the node's training ranks: its GPU, or its share of the cores.
    let trainers_on_node: Vec<usize> = (0..nodes.len())
        .filter(|&r| nodes[r] == nodes[rank] && layout.group_of[r].is_some())
        .collect();
    let local = trainers_on_node.iter().position(|&r| r == rank);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = a
        .threads
        .unwrap_or((cores / trainers_on_node.len().max(1)).max(1));
    let device = match local {
        Some(i) if a.trainer == Trainer::Real && tch::Cuda::is_available() => {
            tch::Device::Cuda(i % tch::Cuda::device_count().max(1) as usize)
        }
        _ => tch::Device::Cpu,
    };
    tch::set_num_threads(threads as i32);
    let device_name = match (a.trainer, local, device) {
        (_, None, _) => "primary".to_string(),
        (Trainer::Simulated, _, _) => format!("simulated {:.3e} OPS", a.sim_ops),
        (Trainer::Real, _, tch::Device::Cuda(i)) => format!("cuda:{i}"),
        (Trainer::Real, _, _) => format!("cpu ({threads} threads)"),
    };
    // The common clock and every rank's host and device, for the records.
    let (clock, offsets) = clock::synchronise(&world);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut hosts = vec![0u8; 64 * world.size() as usize];
    world.all_gather_into(&padded(&host)[..], &mut hosts[..]);
    let mut devices = vec![0u8; 64 * world.size() as usize];
    world.all_gather_into(&padded(&device_name)[..], &mut devices[..]);
    let hosts: Vec<String> = hosts.chunks_exact(64).map(unpadded).collect();
    let devices: Vec<String> = devices.chunks_exact(64).map(unpadded).collect();
    let mut t0 = [resumed_t0.unwrap_or_else(|| clock.now())];
    world.process_at_rank(0).broadcast_into(&mut t0[..]);
    // The data (training ranks of the real trainer) and the start architecture.
    let data_dir = a.data.clone().unwrap_or_else(|| {
        std::env::var_os("AIPERF_DATA")
            .map_or_else(|| PathBuf::from("data"), PathBuf::from)
            .join(&preset.dataset)
    });
    let setup = (|| -> anyhow::Result<(run::TrainerSetup, Graph, String)> {
        match a.trainer {
            Trainer::Simulated => {
                let input = a.input.unwrap_or(Shape::new(3, 32, 32));
                let classes = a.classes.unwrap_or(10);
                let start = arch::by_name(&preset.start, input, classes).ok_or_else(|| {
                    anyhow::anyhow!(
                        "start architecture {:?}: use resnet8, resnet20, resnet18 or resnet50",
                        preset.start
                    )
                })?;
                OpCount::of(&start).with_context(|| {
                    format!("start {} does not fit --input {input}", preset.start)
                })?;
                Ok((
                    run::TrainerSetup::Simulated {
                        device: aiperf::train::simulated::SimDevice {
                            ops_per_s: a.sim_ops,
                            accelerators: 1,
                        },
                        images: (a.sim_train_images, a.sim_val_images),
                        speedup: a.speedup,
                    },
                    start,
                    "synthetic".to_string(),
                ))
            }
            Trainer::Real => {
                let train = open_split(&data_dir, "train")?;
                let val = open_split(&data_dir, "val")?;
                let h = train.header().clone();
                let (oh, ow) = preset.train.augment.output_hw(h.height, h.width);
                let input = Shape::new(h.channels, oh, ow);
                let start =
                    arch::by_name(&preset.start, input, h.num_classes).ok_or_else(|| {
                        anyhow::anyhow!(
                            "start architecture {:?}: use resnet8, resnet20, resnet18 or resnet50",
                            preset.start
                        )
                    })?;
                OpCount::of(&start).with_context(|| {
                    format!(
                        "start {} does not fit the {input} images of {}",
                        preset.start,
                        data_dir.display()
                    )
                })?;
                if val.header().num_classes != h.num_classes {
                    bail!(
                        "{}: train and val splits have different class counts",
                        data_dir.display()
                    );
                }
                Ok((
                    run::TrainerSetup::Real {
                        train: preset.train.clone(),
                        device,
                        train_pack: train,
                        val_pack: val,
                    },
                    start,
                    h.source.dataset.clone(),
                ))
            }
        }
    })();
    // SIGTERM/SIGINT (from mpirun, SLURM): the primary stops the run as at the deadline and
    // leaders abandon the epoch in progress; every rank keeps going until told to stop, so
    // every file closes cleanly.
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(&interrupted))?;
    }
    let (trainer, start, dataset) = match setup {
        Ok(s) => {
            agree(&world, Ok(()))?;
            s
        }
        Err(e) => {
            agree(&world, Err(e))?;
            unreachable!("agree returns the error")
        }
    };
    let results = a
        .results
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("results/run-{}", t0[0] as u64)));
    let precision = match a.trainer {
        Trainer::Simulated => "simulated".to_string(),
        Trainer::Real => preset.train.precision.name().to_string(),
    };
    let cfg = run::RunConfig {
        results: results.clone(),
        duration: std::time::Duration::from_secs_f64(preset.duration_s),
        config_json: serde_json::json!({
            "preset": preset, "trainer": format!("{:?}", a.trainer).to_lowercase(),
            "data": data_dir, "group_size": a.group_size, "threads_per_rank": threads,
            "sim": { "ops": a.sim_ops, "train_images": a.sim_train_images,
                     "val_images": a.sim_val_images, "speedup": a.speedup,
                     "input": a.input.map(|s| format!("{}x{}x{}", s.h, s.w, s.c)), "classes": a.classes },
            "seed": a.seed, "search_threads": a.search_threads,
            "clock_offsets_s": offsets.iter().map(|o| o.0).collect::<Vec<_>>(),
            "clock_uncertainty_s": offsets.iter().map(|o| o.1).collect::<Vec<_>>(),
        })
        .to_string(),
        start,
        start_name: preset.start.clone(),
        trainer,
        epochs: preset.epochs,
        patience_scale: preset.patience_scale,
        space: aiperf::search::Space {
            batch_size: preset.batch_size,
            kernel_sizes: preset.kernel_sizes.clone(),
        },
        seed: a.seed,
        search_threads: a.search_threads,
        dataset,
        precision,
        hosts,
        devices,
        clock,
        deadline_s: t0[0] + preset.duration_s,
        status_interval_s: a.status_interval,
        stall_timeout_s: a.stall_timeout,
        monitor_interval_s: a.monitor_interval,
        interrupted: std::sync::Arc::clone(&interrupted),
        resume: a.resume.is_some(),
    };
    if rank == 0 {
        log::info!(
            "aiperf run: preset {}, {} trainer, {} ranks in {} group(s), {:.0} s, records in {} (should the job die, continue it with `aiperf run --resume {}` under the same launcher)",
            preset.name,
            cfg.precision,
            world.size(),
            layout.groups(),
            preset.duration_s,
            results.display(),
            results.display()
        );
    }
    let color = layout.group_of[rank].map_or(Color::undefined(), |g| Color::with_value(g as i32));
    let group_comm = world.split_by_color(color);
    let outcome = match (layout.group_of[rank], &group_comm) {
        (None, _) => run::primary(&world, &layout, &cfg, t0[0], &interrupted),
        (Some(g), Some(gc)) if layout.leaders[g as usize] == rank => {
            run::leader(&world, gc, g, &cfg)
        }
        (Some(_), Some(gc)) => run::member(gc, &cfg),
        (Some(g), None) => Err(format!("rank {rank} got no communicator for group {g}")),
    };
    if let Err(e) = outcome {
        eprintln!(
            "aiperf: error: rank {rank}: {e}\naiperf: the records written so far in {} stay readable; continue the run with `aiperf run --resume {}`",
            results.display(),
            results.display()
        );
        world.abort(1);
    }
    // Every rank has closed its files.
    world.barrier();
    if rank == 0 {
        let run = aiperf_records::read_run(&results)?;
        let s = aiperf_records::score(&run, preset.score_interval_s.min(preset.duration_s / 4.0))?;
        print!("{}", aiperf_records::report::text(&s));
    }
    Ok(())
}

fn comm_bench(a: CommBenchArgs) -> anyhow::Result<()> {
    use aiperf::cluster::commbench;
    use mpi::topology::Color;
    if a.min_bytes == 0 || a.min_bytes > a.max_bytes || a.iters == 0 {
        bail!("--min-bytes must be in 1..=--max-bytes and --iters at least 1");
    }
    let Some(universe) = mpi::initialize() else {
        bail!("MPI was already initialised");
    };
    let world = universe.world();
    let sizes = commbench::sizes(a.min_bytes, a.max_bytes);
    let mut scopes = vec![(
        "world".to_string(),
        commbench::sweep(&world, &sizes, a.iters, a.warmup),
    )];
    if let Some(g) = a.group_size {
        if g == 0 || world.size() as usize % g != 0 {
            bail!("--group-size {g} must divide the {} ranks", world.size());
        }
        let color = Color::with_value(world.rank() / g as i32);
        let group = world
            .split_by_color(color)
            .context("splitting the world into groups")?;
        let rows = commbench::sweep(&group, &sizes, a.iters, a.warmup);
        scopes.push((format!("groups of {g} ranks (group 0 shown)"), rows));
    }
    if world.rank() == 0 {
        for (scope, rows) in &scopes {
            if a.json {
                for r in rows {
                    let mut v = serde_json::to_value(r)?;
                    v["scope"] = serde_json::json!(scope);
                    println!("{v}");
                }
            } else {
                print!("{}", commbench::table(scope, rows));
            }
        }
    }
    Ok(())
}

fn dp_check(steps: u32, frozen_bn: bool) -> anyhow::Result<()> {
    let Some(universe) = mpi::initialize() else {
        bail!("MPI was already initialised");
    };
    let world = universe.world();
    tch::set_num_threads(1);
    let report = aiperf::train::dp_check(&world, steps, frozen_bn)?;
    if world.rank() == 0 {
        println!("{}", serde_json::to_string(&report)?);
    }
    if !report.identical {
        bail!(
            "rank {}: parameters differ between ranks after gradient exchange",
            world.rank()
        );
    }
    Ok(())
}

fn data_check(a: DataCheckArgs) -> anyhow::Result<()> {
    let pack = open_split(&a.data, &a.split)?;
    let h = pack.header().clone();
    let t = Instant::now();
    pack.verify()?;
    println!(
        "{}: {} {} images {}x{}x{}, {} classes, checksum ok ({:.2} s)",
        pack.path().display(),
        h.num_samples,
        h.source.dataset,
        h.channels,
        h.height,
        h.width,
        h.num_classes,
        t.elapsed().as_secs_f64()
    );
    let cfg = LoaderConfig {
        global_batch: a.batch,
        seed: a.seed,
        augment: a.augment,
        workers: a.workers,
        ..LoaderConfig::default()
    };
    let loader = Loader::new(pack, cfg)?;
    for epoch in 0..a.epochs {
        let t = Instant::now();
        let (mut images, mut sum, mut sq) = (0usize, 0f64, 0f64);
        let mut seen = vec![false; h.num_samples as usize];
        for batch in loader.epoch(epoch) {
            let (x, _y) = batch.to_tensors(tch::Device::Cpu)?;
            sum += x.f_sum(tch::Kind::Double)?.f_double_value(&[])?;
            sq += x
                .f_square()?
                .f_sum(tch::Kind::Double)?
                .f_double_value(&[])?;
            images += batch.len();
            for i in batch.indices {
                if std::mem::replace(&mut seen[i], true) {
                    bail!("epoch {epoch}: sample {i} delivered twice");
                }
            }
        }
        if images != h.num_samples as usize {
            bail!(
                "epoch {epoch}: delivered {images} of {} samples",
                h.num_samples
            );
        }
        let n = (images * loader.sample_shape().iter().product::<usize>()) as f64;
        let mean = sum / n;
        let secs = t.elapsed().as_secs_f64();
        println!(
            "epoch {epoch}: {images} images in {secs:.2} s ({:.0} images/s); normalised mean {mean:+.4}, std {:.4}",
            images as f64 / secs,
            (sq / n - mean * mean).max(0.0).sqrt()
        );
    }
    Ok(())
}

fn search_sim(a: SearchSimArgs) -> anyhow::Result<()> {
    use aiperf::search::{sim, BayesConfig, BayesOptimizer, Space, Tpe, TpeConfig};
    let Some(start) = arch::by_name(&a.start, a.input, a.classes) else {
        bail!("--start {:?}: use resnet20, resnet18 or resnet50", a.start);
    };
    OpCount::of(&start)
        .with_context(|| format!("--start {} does not fit --input {}", a.start, a.input))?;
    let cfg = BayesConfig {
        threads: a.threads,
        seed: a.seed,
        ..BayesConfig::default()
    };
    let optimizer = BayesOptimizer::new(cfg).map_err(anyhow::Error::msg)?;
    let mut tpe = Tpe::new(
        TpeConfig {
            seed: a.seed,
            ..TpeConfig::default()
        },
        Space::default(),
    )
    .map_err(anyhow::Error::msg)?;
    if !a.json {
        println!(
            "{:>5} {:>6} {:>5} {:>4} {:>15} {:>8} {:>10} {:>11} {:>9}  morphisms",
            "trial",
            "father",
            "batch",
            "k",
            "predicted",
            "accuracy",
            "GFLOP/img",
            "params",
            "search s"
        );
    }
    let trials = sim::simulate(&start, a.trials, &optimizer, &mut tpe, a.seed, |t| {
        if a.json {
            println!("{}", serde_json::to_string(t).expect("trial serialises"));
            return;
        }
        let predicted = t
            .predicted
            .map_or("-".into(), |(m, s)| format!("{m:.4}±{s:.4}"));
        println!(
            "{:>5} {:>6} {:>5} {:>4} {:>15} {:>8.4} {:>10.3} {:>11} {:>9.3}  {}",
            t.trial,
            t.father.map_or("-".into(), |f| f.to_string()),
            t.hparams.batch_size,
            t.hparams.kernel_size,
            predicted,
            t.accuracy,
            t.fp_per_image as f64 / 1e9,
            aiperf::ops::group_digits(t.params.into()),
            t.generate_s,
            sim::describe(&t.morphisms)
        );
    });
    if !a.json {
        let best = trials
            .iter()
            .max_by(|x, y| x.accuracy.total_cmp(&y.accuracy))
            .expect("at least one trial");
        let search_s: f64 = trials.iter().map(|t| t.generate_s).sum();
        println!(
            "best: trial {} accuracy {:.4}; {} trials, {:.3} s in the search ({} thread(s))",
            best.trial,
            best.accuracy,
            trials.len(),
            search_s,
            a.threads
        );
    }
    Ok(())
}

/// The architecture `aiperf ops` was asked about.
fn ops_graph(a: &OpsArgs) -> anyhow::Result<Graph> {
    let input = a.input.unwrap_or(Shape::new(3, 224, 224));
    let classes = a.classes.unwrap_or(1000);
    if classes == 0 {
        bail!("--classes must be at least 1");
    }
    if let Some(g) = arch::by_name(&a.arch, input, classes) {
        return Ok(g);
    }
    let path = std::path::Path::new(&a.arch);
    if !path.is_file() {
        bail!(
            "--arch {:?}: neither a built-in architecture (resnet50, resnet20, resnet18) nor a file",
            a.arch
        );
    }
    if a.input.is_some() || a.classes.is_some() {
        bail!(
            "--arch {}: an architecture file fixes its input and classes; drop --input/--classes",
            a.arch
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Graph::from_json(&text)
        .with_context(|| format!("{} is not a valid architecture", path.display()))
}

fn ops(a: OpsArgs) -> anyhow::Result<()> {
    let graph = ops_graph(&a)?;
    let count = OpCount::of(&graph)?;
    if a.json {
        let out = serde_json::json!({
            "input": graph.input_shape(),
            "classes": graph.num_classes(),
            "params": count.params,
            "fp_per_image": count.fp_per_image,
            "bp_per_image": count.bp_per_image,
            "train_per_image": count.train_per_image(),
            "update_per_step": count.update_per_step(),
            "softmax_fp": count.softmax_fp,
            "layers": count.layers,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", count.table());
    }
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Doctor { json } => doctor(json),
        Command::DataCheck(a) => data_check(a),
        Command::Ops(a) => ops(a),
        Command::SearchSim(a) => search_sim(a),
        Command::Score(a) => aiperf_records::cli::run(&a),
        Command::DpCheck { steps, frozen_bn } => dp_check(steps, frozen_bn),
        Command::Run(a) => run_benchmark(*a),
        Command::CommBench(a) => comm_bench(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aiperf: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
