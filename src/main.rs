//! The `aiperf` command line: parses arguments and dispatches into the library.

use std::process::ExitCode;

use aiperf::cli::{Cli, Command};
use aiperf::commands;
use clap::Parser;

/// A command that finished without a verdict to report: success.
fn done(_: ()) -> ExitCode {
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    aiperf::platform::keep_freed_memory();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Doctor(a) => commands::doctor(a.json).map(done),
        Command::DataCheck(a) => a
            .validate()
            .and_then(|()| commands::data_check(a))
            .map(done),
        Command::Ops(a) => a.validate().and_then(|()| commands::ops(a)).map(done),
        Command::SearchSim(a) => a
            .validate()
            .and_then(|()| commands::search_sim(a))
            .map(done),
        Command::Score(a) => {
            aiperf_records::cli::run(&a).map(|outcome| ExitCode::from(outcome.code()))
        }
        Command::DpCheck(a) => a.validate().and_then(|()| commands::dp_check(&a)).map(done),
        Command::Run(a) => commands::run(*a).map(done),
        Command::CommBench(a) => a
            .validate()
            .and_then(|()| commands::comm_bench(a))
            .map(done),
        Command::Audit(a) => a.validate().and_then(|()| commands::audit(a)).map(done),
    };
    match result {
        Ok(code) => code,
        Err(e) if e.downcast_ref::<commands::Silent>().is_some() => ExitCode::FAILURE,
        Err(e) if e.downcast_ref::<commands::AuditFailed>().is_some() => {
            eprintln!("aiperf: {e:#}");
            ExitCode::from(6)
        }
        Err(e) => {
            eprintln!("aiperf: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
