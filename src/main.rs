//! The `aiperf` command line: parses arguments and dispatches into the library.

use std::process::ExitCode;

use aiperf::cli::{Cli, Command};
use aiperf::commands;
use clap::{CommandFactory, FromArgMatches};

/// A command that finished without a verdict to report: success.
fn done(_: ()) -> ExitCode {
    ExitCode::SUCCESS
}

/// The status of a rank other than 0 whose failure rank 0 reports: success, since rank 0
/// fails too and the launcher (`mpirun`, `srun`) passes on its status. A non-zero status
/// here would make `mpirun` kill the job at once, rank 0 with it, often before rank 0 has
/// printed why (an error said once, by rank 0 alone, is lost that way under load).
fn deferred() -> ExitCode {
    ExitCode::SUCCESS
}

/// A check every rank makes alike (its flags): only rank 0 of a launched job reports it.
fn alike(r: anyhow::Result<()>) -> anyhow::Result<()> {
    r.map_err(|e| match commands::launcher_rank() {
        Some(rank) if rank != 0 => commands::Silent.into(),
        _ => e,
    })
}

fn main() -> ExitCode {
    aiperf::host::keep_freed_memory();
    aiperf::host::ignore_file_size_signal();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    // Under a launcher every rank parses the same command line: rank 0 alone prints what
    // clap has to say (an error, or --help) and exits with clap's status; the others leave
    // the status to it (see `deferred`).
    // The long version probes libtorch and MPI: only when asked for (`--version` can only be
    // the first argument, the top-level command having no other flags).
    let mut command = Cli::command().version(aiperf_records::version::short());
    if std::env::args_os().nth(1).is_some_and(|a| a == "--version") {
        command = command.long_version(aiperf::cli::long_version());
    }
    let cli = match command
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) if commands::launcher_rank().unwrap_or(0) == 0 => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
        Err(_) => return deferred(),
    };
    let result = match cli.command {
        Command::Doctor(a) => commands::doctor(a.json, a.device).map(done),
        Command::DataCheck(a) => alike(a.validate())
            .and_then(|()| commands::data_check(a))
            .map(done),
        Command::Ops(a) => alike(a.validate())
            .and_then(|()| commands::ops(a))
            .map(done),
        Command::SearchSim(a) => alike(a.validate())
            .and_then(|()| commands::search_sim(a))
            .map(done),
        Command::Score(a) => {
            aiperf_records::cli::run(&a).map(|outcome| ExitCode::from(outcome.code()))
        }
        Command::DpCheck(a) => alike(a.validate())
            .and_then(|()| commands::dp_check(&a))
            .map(done),
        Command::Run(a) => commands::run(*a).map(done),
        Command::CommBench(a) => alike(a.validate())
            .and_then(|()| commands::comm_bench(a))
            .map(done),
        Command::Audit(a) => alike(a.validate())
            .and_then(|()| commands::audit(a))
            .map(done),
    };
    match result {
        Ok(code) => code,
        Err(e) if e.downcast_ref::<commands::Silent>().is_some() => deferred(),
        Err(e) if e.downcast_ref::<commands::AuditFailed>().is_some() => {
            eprintln!("aiperf: {e:#}");
            ExitCode::from(6)
        }
        Err(e) if e.downcast_ref::<commands::DataDiffers>().is_some() => {
            eprintln!("aiperf: {e:#}");
            ExitCode::from(7)
        }
        Err(e) => {
            eprintln!("aiperf: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
