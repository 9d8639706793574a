//! `aiperf-data-prep`: converts datasets into aiperf's packed format (see data-prep/README.md).

use std::process::ExitCode;

use aiperf_data_prep::cli::{Cli, Command};
use aiperf_data_prep::idx::IdxDataset;
use aiperf_data_prep::imagenet::ImagenetOptions;
use aiperf_data_prep::{cifar, idx, imagenet, Header, Pack};
use anyhow::Context;
use clap::Parser;

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
