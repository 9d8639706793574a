//! The `aiperf` command line: parses arguments and dispatches into the library.

use std::process::ExitCode;

use aiperf::cli::{Cli, Command};
use aiperf::commands;
use clap::Parser;

fn main() -> ExitCode {
    aiperf::platform::keep_freed_memory();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Doctor(a) => commands::doctor(a.json),
        Command::DataCheck(a) => a.validate().and_then(|()| commands::data_check(a)),
        Command::Ops(a) => a.validate().and_then(|()| commands::ops(a)),
        Command::SearchSim(a) => a.validate().and_then(|()| commands::search_sim(a)),
        Command::Score(a) => aiperf_records::cli::run(&a),
        Command::DpCheck(a) => a.validate().and_then(|()| commands::dp_check(&a)),
        Command::Run(a) => commands::run(*a),
        Command::CommBench(a) => a.validate().and_then(|()| commands::comm_bench(a)),
        Command::Audit(a) => a.validate().and_then(|()| commands::audit(a)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<commands::Silent>().is_some() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("aiperf: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
