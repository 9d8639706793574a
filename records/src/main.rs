//! `aiperf-score`: the scoring step alone (HDF5 only), for reviewers re-scoring anywhere.

use std::process::ExitCode;

use aiperf_records::cli::{run, ScoreArgs};
use aiperf_records::version;
use clap::{CommandFactory, FromArgMatches, Parser};

/// Score aiperf runs from their HDF5 records (docs/design.md §5).
#[derive(Parser, Debug)]
#[command(name = "aiperf-score", about)]
struct Cli {
    #[command(flatten)]
    args: ScoreArgs,
}

fn main() -> ExitCode {
    let command = Cli::command()
        .version(version::short())
        .long_version(version::score_long());
    let cli = match Cli::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match run(&cli.args) {
        Ok(outcome) => ExitCode::from(outcome.code()),
        Err(e) => {
            eprintln!("aiperf-score: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
