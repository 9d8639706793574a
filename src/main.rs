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
    /// Score runs from their HDF5 records (DESIGN.md §5); the same as `aiperf-score`.
    Score(aiperf_records::cli::ScoreArgs),
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
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aiperf: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
