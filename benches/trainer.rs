//! Training-overhead benchmark (run by `scripts/bench/bench-train`, not a test): training images/s
//! of one fixed architecture and batch size through aiperf's trial trainer — the code
//! `aiperf run` runs on every rank: loader, shard weighting, gradient exchange (over a
//! one-rank communicator here), learning-rate schedule, one small validation pass — beside a
//! bare tch loop over the same model on tensors already in memory. Prints one JSON object
//! per measurement. `--device cuda` runs both on the GPU (the bare loop's tensors already
//! there), `--precision fp16|bf16` under autocast (fp16: CUDA only, the trainer with its
//! loss scaler, the bare loop without one, a multiply per gradient; bf16: CPU autocast on a
//! processor) and `--memory-format channels-last` with parameters and batches in NHWC. With `--write-arch FILE` it
//! writes the architecture's IR JSON (for the PyTorch peer, `scripts/bench/bench_train_torch.py`)
//! and exits.

use std::path::PathBuf;
use std::time::Instant;

use aiperf::arch::{self, Shape};
use aiperf::data::{open_split, Augment};
use aiperf::model::Net;
use aiperf::search::Hparams;
use aiperf::train::{MemoryFormat, Precision, RealTrainer, TrainConfig, TrialSpec, TrialTrainer};
use clap::Parser;
use tch::nn::{ModuleT, OptimizerConfig};
use tch::{nn, Device, Reduction, Tensor};

#[derive(Parser, Debug)]
struct Args {
    /// Folder with train.aipk and val.aipk.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Built-in architecture.
    #[arg(long, default_value = "resnet8")]
    arch: String,
    /// Input HxWxC and classes, for --write-arch.
    #[arg(long, default_value = "28x28x1")]
    input: Shape,
    #[arg(long, default_value_t = 10)]
    classes: u32,
    /// Batch size.
    #[arg(long, default_value_t = 64)]
    batch: u32,
    /// Optimizer steps per measurement.
    #[arg(long, default_value_t = 100)]
    steps: usize,
    /// Torch threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Alternating repetitions.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Round number, for the output (the script pairs each round's runs).
    #[arg(long, default_value_t = 0)]
    round: usize,
    /// Where both train.
    #[arg(long, value_enum, default_value = "cpu")]
    device: aiperf::platform::DeviceChoice,
    /// Arithmetic (fp16: CUDA autocast; bf16: CUDA or CPU autocast).
    #[arg(long, value_enum, default_value = "fp32")]
    precision: Precision,
    /// Memory format of parameters and batches.
    #[arg(long, value_enum, default_value = "nchw")]
    memory_format: MemoryFormat,
    /// Write the architecture's IR JSON here and exit.
    #[arg(long)]
    write_arch: Option<PathBuf>,
    #[arg(long, hide = true)]
    bench: bool,
}

/// The first `n` images of `pack`, normalised with its statistics, and their labels.
fn in_memory(pack: &aiperf::data::Pack, n: usize) -> (Tensor, Tensor) {
    let h = pack.header();
    let per = (h.channels * h.height * h.width) as usize;
    let mut host = Vec::with_capacity(n * per);
    let (mean, std) = (h.channel_mean[0] as f32, h.channel_std[0] as f32);
    for i in 0..n {
        host.extend(
            pack.image(i)
                .iter()
                .map(|&p| (f32::from(p) / 255.0 - mean) / std),
        );
    }
    let dims = [
        n as i64,
        i64::from(h.channels),
        i64::from(h.height),
        i64::from(h.width),
    ];
    let labels: Vec<i64> = (0..n).map(|i| i64::from(pack.label(i))).collect();
    (
        Tensor::from_slice(&host).view(dims),
        Tensor::from_slice(&labels),
    )
}

/// The bare tch loop over in-memory tensors on `device`: `args.steps` SGD steps; returns its
/// seconds.
fn bare_loop(
    graph: &aiperf::arch::Graph,
    (xs, ys): (&Tensor, &Tensor),
    args: &Args,
    device: Device,
) -> anyhow::Result<f64> {
    tch::manual_seed(1);
    let vs = nn::VarStore::new(device);
    let net = Net::build(&vs.root(), graph)?;
    args.memory_format.apply_to(&vs)?;
    let xs = args.memory_format.apply(xs)?;
    let mut opt = nn::Sgd {
        momentum: 0.9,
        wd: 5e-4,
        ..Default::default()
    }
    .build(&vs, 0.1 * f64::from(args.batch) / 256.0)?;
    let (b, n) = (i64::from(args.batch), xs.size()[0]);
    let t = Instant::now();
    for step in 0..args.steps as i64 {
        let start = (step * b) % (n - b + 1);
        let loss = args
            .precision
            .autocast(device, || net.forward_t(&xs.narrow(0, start, b), true))
            .to_kind(tch::Kind::Float)
            .cross_entropy_loss::<Tensor>(
                &ys.narrow(0, start, b),
                None,
                Reduction::Mean,
                -100,
                0.1,
            );
        opt.zero_grad();
        loss.backward();
        opt.step();
        let _ = loss.double_value(&[]);
    }
    Ok(t.elapsed().as_secs_f64())
}

fn main() -> anyhow::Result<()> {
    // As the aiperf binary does.
    aiperf::host::keep_freed_memory();
    let args = Args::parse();
    let Some(graph) = arch::by_name(&args.arch, args.input, args.classes) else {
        anyhow::bail!("unknown --arch {}", args.arch);
    };
    if let Some(path) = &args.write_arch {
        std::fs::write(path, graph.to_json())?;
        return Ok(());
    }
    let data = args
        .data
        .clone()
        .ok_or_else(|| anyhow::anyhow!("--data DIR is required"))?;
    let device = args.device.resolve(0).map_err(anyhow::Error::msg)?;
    anyhow::ensure!(
        !matches!(args.precision, Precision::Fp16 | Precision::Auto) || device.is_cuda(),
        "--precision {} needs --device cuda (on a processor: fp32 or bf16)",
        args.precision.name()
    );
    anyhow::ensure!(
        args.memory_format != MemoryFormat::Auto,
        "--memory-format: nchw or channels-last"
    );
    tch::set_num_threads(args.threads as i32);
    let universe = mpi::initialize().ok_or_else(|| anyhow::anyhow!("MPI init"))?;
    let world = universe.world();
    let train = open_split(&data, "train")?;
    let val = open_split(&data, "val")?;
    let h = train.header().clone();
    anyhow::ensure!(
        Shape::new(h.channels, h.height, h.width) == args.input && h.num_classes == args.classes,
        "--input/--classes must match the data"
    );
    let images = args.steps * args.batch as usize;
    let cfg = TrainConfig {
        lr_per_256: 0.1,
        momentum: 0.9,
        weight_decay: 5e-4,
        label_smoothing: 0.1,
        warmup_epochs: 0.0,
        train_images: Some(images),
        val_images: Some(args.batch as usize),
        augment: Augment::None,
        val_augment: Augment::None,
        val_batch: args.batch as usize,
        loader_workers: 2,
        prefetch: 2,
        precision: args.precision,
        memory_format: args.memory_format,
        // MPI initialised without threads: the exchange after backward.
        exchange: aiperf::exchange::ExchangeConfig {
            method: aiperf::exchange::ExchangeMethod::Allreduce,
            ..aiperf::exchange::ExchangeConfig::default()
        }
        .within(mpi::Threading::Single),
        trace_steps: 0,
        augment_on: aiperf::train::AugmentOn::Auto,
    };
    let spec = TrialSpec {
        graph: graph.clone(),
        hparams: Hparams {
            batch_size: args.batch,
            kernel_size: 3,
        },
        seed: 1,
        epochs: 1000,
    };
    let real = RealTrainer {
        cfg,
        device,
        train_pack: std::sync::Arc::clone(&train),
        val_pack: val,
    };
    // The bare loop's data: the same images, normalised once, in memory.
    let n = images.min(train.len());
    let (xs, ys) = in_memory(&train, n);
    let (xs, ys) = (xs.to(device), ys.to(device));
    let (label, precision) = (aiperf::host::device_label(device), args.precision.name());
    let report = |what: &str, rep: usize, secs: f64| {
        println!(
            "{{\"impl\":\"{what}\",\"round\":{},\"arch\":\"{}\",\"device\":\"{label}\",\"precision\":\"{precision}\",\"memory_format\":\"{}\",\"batch\":{},\"threads\":{},\"rep\":{rep},\"images\":{images},\"seconds\":{secs:.6},\"images_per_s\":{:.1}}}",
            args.round,
            args.arch,
            args.memory_format.name(),
            args.batch,
            args.threads,
            images as f64 / secs
        );
    };
    // The trainer's epoch.
    let run_aiperf = |rep: usize| -> anyhow::Result<f64> {
        let mut trainer = TrialTrainer::new(&world, &real, &spec)?;
        let t = Instant::now();
        let stats = trainer.epoch(1 + rep as u32, &|| false)?;
        let secs = t.elapsed().as_secs_f64();
        anyhow::ensure!(stats.figures.train_images as usize == images, "short epoch");
        // Where the epoch's time went, as the trainer measured it (stderr: the script reads
        // stdout).
        eprintln!(
            "aiperf epoch: {secs:.3} s, compute {:.3} s, exchange {:.3} s, data wait {:.3} s",
            stats.compute_s, stats.allreduce_s, stats.data_wait_s
        );
        Ok(secs)
    };
    let run_bare = || bare_loop(&graph, (&xs, &ys), &args, device);
    for rep in 0..args.reps {
        // Alternate which runs first (ABBA), so warm-up and drift hit both alike.
        if rep % 2 == 0 {
            report("aiperf", rep, run_aiperf(rep)?);
            report("bare-tch", rep, run_bare()?);
        } else {
            report("bare-tch", rep, run_bare()?);
            report("aiperf", rep, run_aiperf(rep)?);
        }
    }
    Ok(())
}
