//! `aiperf-score`: the scoring step alone (HDF5 only), for reviewers re-scoring anywhere.

use std::process::ExitCode;

use aiperf_records::cli::{run, ScoreArgs};
use clap::Parser;

/// Score aiperf runs from their HDF5 records (DESIGN.md §5).
#[derive(Parser, Debug)]
#[command(name = "aiperf-score", version, about)]
struct Cli {
    #[command(flatten)]
    args: ScoreArgs,
}

fn main() -> ExitCode {
    match run(&Cli::parse().args) {
        Ok(outcome) => ExitCode::from(outcome.code()),
        Err(e) => {
            eprintln!("aiperf-score: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
