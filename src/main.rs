//! The `aiperf` command line: parses arguments and dispatches into the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use aiperf::arch::{self, Graph, Shape};
use aiperf::data::{open_split, Augment, Loader, LoaderConfig};
use aiperf::ops::OpCount;
use aiperf::platform::Platform;
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
    /// The benchmark under MPI (rank 0 the primary, the other ranks replica groups). So far
    /// with the simulated trainer: epochs cost their real operation counts at a declared speed.
    Run(RunArgs),
    /// Score runs from their HDF5 records (DESIGN.md §5); the same as `aiperf-score`.
    Score(aiperf_records::cli::ScoreArgs),
}

/// The trainer of `aiperf run`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Trainer {
    /// No tensors: epoch time from the op count and --sim-ops, accuracy from a learning curve.
    Simulated,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Which trainer the replicas use.
    #[arg(long, value_enum)]
    trainer: Trainer,
    /// Run duration in seconds.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Ranks per replica group (default: one group per node).
    #[arg(long)]
    group_size: Option<usize>,
    /// Records folder (default: results/run-<start time>).
    #[arg(long)]
    results: Option<PathBuf>,
    /// Start architecture: resnet20, resnet18 or resnet50.
    #[arg(long, default_value = "resnet20")]
    start: String,
    /// Input size HxWxC.
    #[arg(long, default_value = "32x32x3")]
    input: Shape,
    /// Classes.
    #[arg(long, default_value_t = 10)]
    classes: u32,
    /// Full epoch budget (warm-up rounds train 1/4, 1/2, 3/4 of it).
    #[arg(long, default_value_t = 8)]
    epochs: u32,
    /// Simulated: sustained operations per second of one accelerator.
    #[arg(long, default_value_t = 1e13)]
    sim_ops: f64,
    /// Simulated: training and validation images per epoch.
    #[arg(long, default_value_t = 50_000)]
    sim_train_images: u64,
    /// Simulated: validation images per epoch.
    #[arg(long, default_value_t = 10_000)]
    sim_val_images: u64,
    /// Simulated seconds per wall-clock second.
    #[arg(long, default_value_t = 100.0)]
    speedup: f64,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Threads of each leader's search pool.
    #[arg(long, default_value_t = 1)]
    search_threads: usize,
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

fn run_benchmark(a: RunArgs) -> anyhow::Result<()> {
    use aiperf::cluster::{layout, run};
    use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
    use mpi::topology::Color;
    let Some(universe) = mpi::initialize() else {
        bail!("MPI was already initialised");
    };
    let world = universe.world();
    let Trainer::Simulated = a.trainer;
    if !(a.duration > 0.0 && a.speedup > 0.0 && a.sim_ops > 0.0) || a.epochs == 0 {
        bail!("--duration, --speedup, --sim-ops and --epochs must be positive");
    }
    let Some(start) = arch::by_name(&a.start, a.input, a.classes) else {
        bail!("--start {:?}: use resnet20, resnet18 or resnet50", a.start);
    };
    OpCount::of(&start)
        .with_context(|| format!("--start {} does not fit --input {}", a.start, a.input))?;
    // Node of every rank: the lowest world rank sharing its memory.
    let node = world.split_shared(0);
    let mut lowest = 0i32;
    node.all_reduce_into(&world.rank(), &mut lowest, SystemOperation::min());
    let mut nodes = vec![0i32; world.size() as usize];
    world.all_gather_into(&lowest, &mut nodes[..]);
    let nodes: Vec<u64> = nodes.iter().map(|&n| n as u64).collect();
    let layout = layout::layout(&nodes, a.group_size).map_err(anyhow::Error::msg)?;
    // The common clock: rank 0's start.
    let mut t0 = [std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64()];
    world.process_at_rank(0).broadcast_into(&mut t0[..]);
    let results = a
        .results
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("results/run-{}", t0[0] as u64)));
    let cfg = run::SimRunConfig {
        results: results.clone(),
        duration: std::time::Duration::from_secs_f64(a.duration),
        config_json: serde_json::json!({
            "trainer": "simulated", "duration_s": a.duration, "group_size": a.group_size, "start": a.start,
            "input": a.input.to_string(), "classes": a.classes, "epochs": a.epochs, "sim_ops": a.sim_ops,
            "sim_train_images": a.sim_train_images, "sim_val_images": a.sim_val_images, "speedup": a.speedup,
            "seed": a.seed, "search_threads": a.search_threads,
        })
        .to_string(),
        start,
        start_name: a.start.clone(),
        device: aiperf::train::simulated::SimDevice { ops_per_s: a.sim_ops, accelerators: 1 },
        images: (a.sim_train_images, a.sim_val_images),
        epochs: a.epochs,
        speedup: a.speedup,
        seed: a.seed,
        search_threads: a.search_threads,
    };
    // SIGTERM/SIGINT (from mpirun, SLURM): the primary stops the run as at the deadline; the
    // other ranks keep going until it tells them to stop, so every file closes cleanly.
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(&interrupted))?;
    }
    let rank = world.rank() as usize;
    let color = layout.group_of[rank].map_or(Color::undefined(), |g| Color::with_value(g as i32));
    let group_comm = world.split_by_color(color);
    let outcome = match (layout.group_of[rank], &group_comm) {
        (None, _) => run::primary(&world, &layout, &cfg, t0[0], &interrupted),
        (Some(g), Some(gc)) if layout.leaders[g as usize] == rank => {
            run::leader(&world, gc, g, &cfg)
        }
        (Some(_), Some(gc)) => {
            run::member(gc);
            Ok(())
        }
        (Some(g), None) => Err(format!("rank {rank} got no communicator for group {g}")),
    };
    if let Err(e) = outcome {
        eprintln!("aiperf: error: rank {rank}: {e}");
        world.abort(1);
    }
    if rank == 0 {
        let run = aiperf_records::read_run(&results)?;
        let s = aiperf_records::score(
            &run,
            aiperf_records::score::OFFICIAL_INTERVAL_S.min(a.duration / 4.0),
        )?;
        print!("{}", aiperf_records::report::text(&s));
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
        Command::Run(a) => run_benchmark(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aiperf: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
