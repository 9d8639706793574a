//! `aiperf-data-prep`: converts datasets into aiperf's packed format (see data-prep/README.md).

use std::path::PathBuf;
use std::process::ExitCode;

use aiperf_data_prep::idx::IdxDataset;
use aiperf_data_prep::imagenet::ImagenetOptions;
use aiperf_data_prep::{cifar, idx, imagenet, Header, Pack};
use anyhow::Context;
use clap::{Parser, Subcommand};

/// Convert image datasets into aiperf's packed training format (train.aipk + val.aipk).
#[derive(Parser, Debug)]
#[command(name = "aiperf-data-prep", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Fashion-MNIST IDX files (gzipped or not), e.g. /usr/share/datasets/fashion-mnist.
    FashionMnist(IdxArgs),
    /// MNIST IDX files (gzipped or not).
    Mnist(IdxArgs),
    /// CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin, batches.meta.txt).
    Cifar10 {
        /// The `cifar-10-batches-bin` folder.
        #[arg(long)]
        src: PathBuf,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
    },
    /// ImageNet ILSVRC-2012 layout: train/<wnid>/*.JPEG and val/ (class folders or flat).
    Imagenet {
        /// Folder holding train/ and val/.
        #[arg(long)]
        src: PathBuf,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
        /// Output resolution (1..=4096): shorter side resized to SIZE, centre crop SIZE×SIZE.
        #[arg(long, default_value_t = 224)]
        size: u32,
        /// For a flat val/: lines `<image> <wnid>` (also reads Kaggle's LOC_val_solution.csv).
        #[arg(long)]
        val_labels: Option<PathBuf>,
        /// Lines `<wnid> <name>` (e.g. LOC_synset_mapping.txt) for readable class names.
        #[arg(long)]
        synsets: Option<PathBuf>,
        /// Skip unreadable or too large JPEGs and report how many, instead of stopping at the first.
        #[arg(long)]
        skip_bad: bool,
        /// Keep at most N images per class and split (small subsets).
        #[arg(long, value_name = "N")]
        limit_per_class: Option<usize>,
        /// Decoding threads (default: all cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
    },
    /// Print a packed file's header; with --verify, check its checksum.
    Info {
        /// A .aipk file.
        file: PathBuf,
        /// Read the whole file and check CRC-32, pixel sum and labels.
        #[arg(long)]
        verify: bool,
    },
}

#[derive(clap::Args, Debug)]
struct IdxArgs {
    /// Folder with train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-*.
    #[arg(long)]
    src: PathBuf,
    /// Output folder (train.aipk, val.aipk).
    #[arg(long)]
    out: PathBuf,
}

fn summary(h: &Header) -> String {
    format!(
        "{:<5} {:>8} images {}x{}x{}  {} classes  crc32 {:08x}  pixel sum {}{}",
        h.split,
        h.num_samples,
        h.channels,
        h.height,
        h.width,
        h.num_classes,
        h.crc32,
        h.pixel_sum,
        if h.skipped > 0 {
            format!("  skipped {}", h.skipped)
        } else {
            String::new()
        }
    )
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let (out, headers) = match cli.command {
        Command::FashionMnist(a) => (
            a.out.clone(),
            idx::convert_idx_dir(&a.src, &a.out, IdxDataset::FashionMnist)?,
        ),
        Command::Mnist(a) => (
            a.out.clone(),
            idx::convert_idx_dir(&a.src, &a.out, IdxDataset::Mnist)?,
        ),
        Command::Cifar10 { src, out } => (out.clone(), cifar::convert_cifar10(&src, &out)?),
        Command::Imagenet {
            src,
            out,
            size,
            val_labels,
            synsets,
            skip_bad,
            limit_per_class,
            threads,
        } => {
            let opts = ImagenetOptions {
                size,
                skip_bad,
                val_labels,
                synsets,
                limit_per_class,
                threads,
                progress: true,
            };
            (out.clone(), imagenet::convert_imagenet(&src, &out, &opts)?)
        }
        Command::Info { file, verify } => {
            let pack = Pack::open(&file)?;
            if verify {
                pack.verify()?;
            }
            let json =
                serde_json::to_string_pretty(pack.header()).context("printing the header")?;
            println!("{json}");
            if verify {
                eprintln!("{}: checksum ok", file.display());
            }
            return Ok(());
        }
    };
    for h in &headers {
        println!("{}", summary(h));
    }
    println!("wrote {}", out.display());
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aiperf-data-prep: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
