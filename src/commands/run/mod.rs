//! `aiperf run`: resolves the configuration (fresh, or from the records with `--resume`)
//! identically on every rank, sets the world up, builds this rank's trainer, runs its role,
//! and on rank 0 prints the score. Errors that every rank finds alike are printed once by
//! rank 0; errors of one rank name it; a fatal error mid-run aborts the whole job.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context};
use mpi::collective::CommunicatorCollectives;
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::Communicator;

use super::{agree, init_mpi, once, set_results_hint};
use crate::arch::Graph;
use crate::config::{RecordedConfig, RunFlags, TrainerKind};
use crate::platform::DeviceChoice;
use crate::roles::dispatch::{run_role, RunContext, StartRecord};
use crate::train::Trainer;
use crate::world::bootstrap::{self, Placement};
use crate::world::transport::broadcast_value;
use aiperf_records::folder as claim;
use trainers::{Built, Images};

mod trainers;

/// What rank 0 read from a stopped run's records, for every rank.
#[derive(serde::Serialize, serde::Deserialize)]
struct Saved {
    config_json: String,
    t0_s: f64,
    world_size: u32,
    groups: u32,
    /// The claim of the run's gone job, which this job takes over (`None`: none was left).
    claim: Option<String>,
}

/// Runs the benchmark.
pub fn run(flags: RunFlags) -> anyhow::Result<()> {
    if flags.print_config {
        return print_config(&flags);
    }
    let (universe, level) = init_mpi()?;
    let world = universe.world();
    // Each rank reads the preset file from its own disk: where one cannot, rank 0 must
    // hear of it (it would otherwise wait in the next collective), so the outcome is agreed.
    let (config, saved, given) = agree(&world, configure(&world, &flags))?;
    let device = flags.device;
    drop(flags);
    agree(&world, gpus_usable(&config, device))?;
    // Agreed, not `once`: `--device cuda` fails on the training ranks only (the primary
    // needs no device), and every rank must hear of it.
    let place = agree(&world, placement(&world, &config, saved.as_ref(), device))?;
    tch::set_num_threads(i32::try_from(place.threads).unwrap_or(i32::MAX));
    let common = bootstrap::common(&world, &place, saved.as_ref().map(|s| s.t0_s));
    let mut config = config;
    config.clock_offsets_s = common.offsets.iter().map(|o| o.0).collect();
    config.clock_uncertainty_s = common.offsets.iter().map(|o| o.1).collect();
    let results = (given.results.clone())
        .unwrap_or_else(|| PathBuf::from(format!("results/run-{}", common.t0_s as u64)));
    if saved.is_none() {
        let mine =
            (world.rank() == 0).then(|| claim::check_fresh(&results).map_err(|e| format!("{e:#}")));
        let fresh: Result<(), String> = broadcast_value(&world, mine.as_ref())?;
        once(&world, fresh.map_err(anyhow::Error::msg))?;
    }
    let rank = world.rank();
    set_results_hint(rank, &results);
    let color = place.layout.group_of[rank as usize]
        .map_or(Color::undefined(), |g| Color::with_value(g as i32));
    let group_comm = world.split_by_color(color);
    resolve_exchange(&world, group_comm.as_ref(), level, &mut config);
    let ceilings =
        super::arithmetic::resolve(&world, &place, &common, &mut config, trainers::first_graph)?;
    let built = trainers::trainer(&world, &config, &place, &given);
    let Built {
        trainer,
        start,
        dataset,
    } = agree(&world, built)?;
    let (claim, held) = claim_results(&world, &results, common.t0_s, saved.as_ref())?;
    // Rank 0 keeps the claim fresh while the job lives: a resume elsewhere can tell.
    let _heartbeat = held.as_ref().map(claim::Heartbeat::start);
    // Every rank or none goes on to its role: one rank's failure here must not leave the
    // others waiting in it.
    let to = Destination {
        results: results.clone(),
        claim,
        resume: saved.is_some(),
    };
    let built = context(&config, &common, to, trainer, start);
    let ctx = agree(&world, built)?;
    let start = StartRecord {
        dataset,
        precision: precision_name(&config, &given),
        devices: common.devices.clone(),
        platform: aiperf_records::platform::entries(&common.platform, &common.hosts),
        ceilings,
    };
    let p = &config.preset;
    if world.rank() == 0 {
        log::info!(
            "aiperf run: preset {}, {} trainer ({}), {} ranks in {} group(s), {:.0} s, records in {} (should the job die, continue it with `aiperf run --resume {}` under the same launcher)",
            p.name,
            ctx.trainer.name(),
            start.precision,
            world.size(),
            place.layout.groups(),
            p.duration_s,
            results.display(),
            results.display()
        );
    }
    if let Err(e) = run_role(&world, group_comm.as_ref(), &place, &ctx, &config, &start) {
        abort_job(&world, &results, &e);
    }
    // Every rank has closed its files.
    world.barrier();
    if rank == 0 {
        print_score(&results, &config)?;
    }
    Ok(())
}

/// A role failed on this rank: says so, with how to continue where there are records to
/// continue from, and ends the whole job (no rank is left waiting for this one).
fn abort_job(world: &SimpleCommunicator, results: &Path, e: &anyhow::Error) -> ! {
    let hint = if results.join(aiperf_records::schema::PRIMARY_FILE).is_file() {
        format!(
            "\naiperf: the records written so far in {} stay readable; continue the run with `aiperf run --resume {}`",
            results.display(),
            results.display()
        )
    } else {
        String::new()
    };
    eprintln!(
        "aiperf: error: rank {} on {}: {e:#}{hint}",
        world.rank(),
        bootstrap::host_name()
    );
    world.abort(1)
}

/// The exchange settled before anything is recorded: `--exchange auto` measured on the
/// groups and resolved (collective over `world`), the overlap kept where MPI's thread
/// level `provided` allows it; the simulated trainer exchanges nothing and keeps it as is.
fn resolve_exchange(
    world: &SimpleCommunicator,
    group: Option<&SimpleCommunicator>,
    provided: mpi::Threading,
    config: &mut RecordedConfig,
) {
    if config.trainer != TrainerKind::Simulated {
        let x = &mut config.preset.train.exchange;
        *x = x.within(provided);
        crate::exchange::resolve_auto(world, group, x);
    }
}

/// Collective, once every check has passed: rank 0 claims the results folder for this job
/// (a resumed run takes the gone job's claim over) and every rank learns the claim, which
/// each writer checks again before its first record. Rank 0 also gets the folder it holds.
fn claim_results(
    world: &SimpleCommunicator,
    results: &Path,
    t0_s: f64,
    saved: Option<&Saved>,
) -> anyhow::Result<(claim::Claim, Option<claim::Claimed>)> {
    let replaces = saved.and_then(|s| s.claim.clone());
    let mut held = None;
    let mine = (world.rank() == 0).then(|| {
        let me = claim::identity(t0_s);
        let claimed = match saved {
            Some(_) => claim::take_over(results, replaces.as_deref(), &me),
            None => claim::claim_fresh(results, &me),
        };
        match claimed {
            Ok(folder) => {
                held = Some(folder);
                Ok(me)
            }
            Err(e) => Err(format!("{e:#}")),
        }
    });
    let claimed: Result<String, String> = broadcast_value(world, mine.as_ref())?;
    let me = once(world, claimed.map_err(anyhow::Error::msg))?;
    Ok((claim::Claim { me, replaces }, held))
}

/// `--print-config`: the resolved preset as a preset file.
fn print_config(flags: &RunFlags) -> anyhow::Result<()> {
    if flags.resume.is_some() {
        bail!("--print-config does not combine with --resume");
    }
    let c = RecordedConfig::fresh(flags)?;
    println!("{}", serde_json::to_string_pretty(&c.preset)?);
    Ok(())
}

/// Collective: this rank's placement; a resumed run must keep its groups.
fn placement(
    world: &SimpleCommunicator,
    config: &RecordedConfig,
    saved: Option<&Saved>,
    device: DeviceChoice,
) -> anyhow::Result<Placement> {
    let place = bootstrap::place(world, config, device).map_err(anyhow::Error::msg)?;
    if let Some(s) = saved {
        if place.layout.groups() != s.groups {
            bail!(
                "--resume: the run had {} groups, this layout makes {}: use the first run's --group-size (recorded in its config)",
                s.groups,
                place.layout.groups()
            );
        }
    }
    Ok(place)
}

/// A node with GPUs and a libtorch without CUDA would train the real trainer on the host's
/// processors: refused (on whichever rank sees it; the agreed error names its rank and host)
/// unless `--device cpu`.
fn gpus_usable(config: &RecordedConfig, device: DeviceChoice) -> anyhow::Result<()> {
    if config.trainer != TrainerKind::Real {
        return Ok(());
    }
    crate::gpu::usable(device).map_err(anyhow::Error::msg)
}

/// Rank 0, once every rank has closed its files: the score table of the run.
fn print_score(results: &Path, config: &RecordedConfig) -> anyhow::Result<()> {
    let p = &config.preset;
    let run = aiperf_records::read_run(results)?;
    let s = aiperf_records::score(&run, p.score_interval_s.min(p.duration_s / 4.0))
        .map_err(|e| anyhow::anyhow!("{e}{}", diverged(&run, config)))?;
    print!("{}", aiperf_records::report::text(&s));
    Ok(())
}

/// When every trial failed (their losses non-finite) but those the deadline cut before they
/// completed an epoch, the settings that make training diverge, named with their values;
/// else nothing.
fn diverged(run: &aiperf_records::Run, config: &RecordedConfig) -> String {
    use aiperf_records::schema::TrialStatus;
    let cut_bare =
        |t: &aiperf_records::schema::TrialRow| t.status == TrialStatus::Stopped && t.epochs == 0;
    let all_failed = run.trials.iter().any(|t| t.status == TrialStatus::Failed)
        && run
            .trials
            .iter()
            .all(|t| t.status == TrialStatus::Failed || cut_bare(t));
    if !all_failed {
        return String::new();
    }
    let t = &config.preset.train;
    format!(
        ": every trial's loss was non-finite, so training diverges with these settings: train.lr_per_256 {}, train.momentum {}, train.weight_decay {}, train.warmup_epochs {}, train.label_smoothing {}, precision {} (lower the learning rate or weight decay in the preset; `aiperf run --print-config` shows them)",
        t.lr_per_256,
        t.momentum,
        t.weight_decay,
        t.warmup_epochs,
        t.label_smoothing,
        t.precision.name()
    )
}

/// What every rank's role needs; also arms SIGTERM/SIGINT: the primary stops the run as
/// at the deadline and leaders abandon the epoch in progress, and every rank goes on until
/// told to stop, so every file closes cleanly.
fn context(
    config: &RecordedConfig,
    common: &bootstrap::Common,
    to: Destination,
    trainer: Box<dyn Trainer>,
    start: Graph,
) -> anyhow::Result<RunContext> {
    let Destination {
        results,
        claim,
        resume,
    } = to;
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&interrupted))?;
    }
    let p = &config.preset;
    Ok(RunContext {
        results,
        claim,
        start,
        epochs: p.epochs,
        patience_scale: p.patience_scale,
        kernel_sizes: p.kernel_sizes.clone(),
        seed: config.seed,
        search_threads: config.search_threads,
        trace_steps: p.train.trace_steps,
        // Stand-in trainers put many groups on one machine's cores: one search at a time.
        search_lock: (config.trainer != TrainerKind::Real)
            .then(|| std::env::temp_dir().join("aiperf-search.lock")),
        hosts: common.hosts.clone(),
        clock: common.clock,
        t0_s: common.t0_s,
        deadline_s: common.t0_s + p.duration_s,
        monitor_interval_s: config.intervals.monitor_s,
        interrupted,
        resume,
        trainer,
        patience: crate::world::transport::Patience {
            wait: std::time::Duration::from_secs_f64(config.intervals.stall_timeout_s),
            host: common.hosts.first().cloned().unwrap_or_default(),
        },
    })
}

/// The recorded configuration's precision, or what replaces it (never VALID).
fn precision_name(config: &RecordedConfig, given: &Given) -> String {
    let base = match config.trainer {
        TrainerKind::Simulated => "simulated",
        TrainerKind::Emulated => "emulated",
        TrainerKind::Real => config.preset.train.precision.name(),
    };
    match given.fault {
        Some(_) => format!("{base}, fault-injected"),
        None => base.to_string(),
    }
}

/// Where this job's records go: the folder, the claim every writer checks before its first
/// record, and whether the job continues a stopped run.
struct Destination {
    results: PathBuf,
    claim: claim::Claim,
    resume: bool,
}

/// What the command line asks of a run beyond its recorded configuration, parsed once with
/// it ([`configure`]); nothing reads the flags after.
struct Given {
    /// Where the records go (`--resume` or `--results`; `None`: `results/run-<start>`).
    results: Option<PathBuf>,
    /// `--train-images` and `--val-images`, which must exist in the packs (a preset's own
    /// counts are caps).
    images: Images,
    /// The test double `--fault`: never recorded (the records' precision says
    /// `fault-injected`, and such a run is never VALID).
    fault: Option<crate::train::fault::Fault>,
}

/// Collective: the configuration, identical on every rank, and what else the flags ask;
/// with `--resume`, rank 0 reads the records and broadcasts what it found.
fn configure(
    world: &SimpleCommunicator,
    flags: &RunFlags,
) -> anyhow::Result<(RecordedConfig, Option<Saved>, Given)> {
    let given = Given {
        results: flags.resume.clone().or_else(|| flags.results.clone()),
        images: Images {
            train: flags.train_images,
            val: flags.val_images,
        },
        fault: flags.fault,
    };
    let Some(dir) = flags.resume.clone() else {
        return Ok((RecordedConfig::fresh(flags)?, None, given));
    };
    RecordedConfig::check_resume_flags(flags, &dir)?;
    let mine = (world.rank() == 0).then(|| read_saved(&dir).map_err(|e| format!("{e:#}")));
    let saved = broadcast_value(world, mine.as_ref())?.map_err(anyhow::Error::msg)?;
    if saved.world_size != world.size() as u32 {
        bail!(
            "--resume {}: the run had {} ranks; resume it with the same number (here {})",
            dir.display(),
            saved.world_size,
            world.size()
        );
    }
    let config = RecordedConfig::resumed(flags, &dir, &saved.config_json)?;
    Ok((config, Some(saved), given))
}

/// Rank 0: a stopped run's configuration and start; refuses a run that already ended at
/// its deadline (resuming it would rewrite its score).
fn read_saved(dir: &Path) -> anyhow::Result<Saved> {
    // Before the records are opened: a live job may be writing them.
    let claim = claim::check_resume(dir)?;
    let config_json =
        aiperf_records::read_config(dir).with_context(|| format!("--resume {}", dir.display()))?;
    let info = aiperf_records::read_run(dir)
        .with_context(|| format!("--resume {}", dir.display()))?
        .info;
    let duration = serde_json::from_str::<RecordedConfig>(&config_json)
        .map(|c| c.preset.duration_s)
        .unwrap_or(f64::INFINITY);
    if let Some(end) = info.end_time_s {
        if end >= info.start_time_s + duration - 1e-6 {
            bail!(
                "--resume {}: the run already ended at its deadline ({:.0} s after its start): there is nothing to resume; score it with `aiperf score {}`",
                dir.display(),
                end - info.start_time_s,
                dir.display()
            );
        }
    }
    Ok(Saved {
        config_json,
        t0_s: info.start_time_s,
        world_size: info.world_size,
        groups: info.groups,
        claim,
    })
}
