//! `aiperf-data-prep`'s command line (clap's types), in the library so that tests parse the
//! documented commands with the same definitions the binary uses.

// The doc comments of clap's types are the `--help` text, where `<run-id>` is meant
// literally, not as HTML.
#![allow(rustdoc::invalid_html_tags)]

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Convert image datasets into aiperf's packed training format (train.aipk + val.aipk).
#[derive(Parser, Debug)]
#[command(name = "aiperf-data-prep", version, about)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands: one per input format, and `info`.
#[derive(Subcommand, Debug)]
pub enum Command {
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

/// The flags of the IDX converters.
#[derive(clap::Args, Debug)]
pub struct IdxArgs {
    /// Folder with train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-*.
    #[arg(long)]
    pub src: PathBuf,
    /// Output folder (train.aipk, val.aipk).
    #[arg(long)]
    pub out: PathBuf,
}
