//! The dispatch of each rank to its role, in one place: the primary on rank 0 (which opens,
//! serves and closes the records), a leader or a member elsewhere; each given the
//! [`RunContext`] every rank shares.

use aiperf_records::rules::{AlgorithmId, DatasetIdentity, SearchRecord};
use aiperf_records::writer::{PrimaryWriter, RunMeta};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;

pub use super::context::RunContext;
use super::group;
use super::primary::resume;
use super::primary::{self, Primary, PrimaryConfig};
use crate::config::RecordedConfig;
use crate::search::Space;
use crate::train::schedule::{epoch_budget, patience};
use crate::world::bootstrap::Placement;
use crate::world::transport::abort_job;

/// What the primary records at the start of a fresh run besides the configuration.
pub struct StartRecord {
    /// The dataset, from the packs' headers (or the simulated trainer's settings).
    pub dataset: DatasetIdentity,
    /// Arithmetic (or `simulated`).
    pub precision: String,
    /// Every rank's device.
    pub devices: Vec<String>,
    /// One entry per distinct platform among the ranks.
    pub platform: Vec<aiperf_records::platform::PlatformEntry>,
    /// Each training rank's measured ceiling.
    pub ceilings: Vec<aiperf_records::ceiling::Ceiling>,
}

/// Rank 0: opens (or, on resume, reopens) `primary.h5`, serves every group, closes the
/// records. Errs when a group stalled or the protocol broke.
pub fn run_primary(
    world: &SimpleCommunicator,
    place: &Placement,
    ctx: &RunContext,
    config: &RecordedConfig,
    start: &StartRecord,
) -> anyhow::Result<()> {
    let preset = &config.preset;
    let groups = place.layout.leaders.len();
    let pcfg = PrimaryConfig {
        leaders: place.layout.leaders.clone(),
        space: Space {
            batch_size: preset.batch_size,
            kernel_sizes: preset.kernel_sizes.clone(),
        },
        defaults: preset.default_hparams(),
        seed: ctx.seed,
        deadline_s: ctx.deadline_s,
        stop_after_epochs: config.stop_after_epochs,
        stop_after_trials: config.stop_after_trials,
        view_bound: crate::search::bayes::MAX_FIT,
    };
    let folder = aiperf_records::folder::confirm(&ctx.results, &ctx.claim)?;
    let (writer, resumed) = if ctx.resume {
        // Read the stopped run first (read-only), then reopen its file for appending.
        let state = resume::read(&ctx.results, groups)?;
        let writer = PrimaryWriter::reopen(&folder, state.stopped_s, ctx.clock.now())?;
        (writer, Some(state))
    } else {
        let meta = run_meta(world, ctx, config, start, groups);
        (PrimaryWriter::create(&folder, &meta)?, None)
    };
    let mut p = Primary::new(writer, pcfg)?;
    if let Some(r) = resumed {
        log::info!(
            "resuming {}: {} models trained, {} registered, {} TPE observations, {} epochs recorded",
            ctx.results.display(),
            r.history.len(),
            r.seen.len(),
            r.tpe.len(),
            r.totals.epochs
        );
        p.restore(r);
    }
    let serve_cfg = primary::ServeConfig {
        t0_s: ctx.t0_s,
        deadline_s: ctx.deadline_s,
        clock: ctx.clock,
        intervals: config.intervals,
        hosts: &ctx.hosts,
        leaders: &place.layout.leaders,
        interrupted: &ctx.interrupted,
        records: &ctx.results,
    };
    let outcome = primary::serve(world, &mut p, &serve_cfg)?;
    let chains = p.chains();
    let digest = p.into_sink().finish(outcome.end_s, &chains)?;
    log_run_digest(&digest, &chains, &ctx.results);
    if outcome.stalled.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "stalled group(s) {:?} made no progress for --stall-timeout {:.0} s; primary.h5 is closed, the other groups stopped cleanly, and every completed epoch is on record: re-score with `aiperf-score {}` once the job has ended",
        outcome.stalled,
        config.intervals.stall_timeout_s,
        ctx.results.display()
    )
}

/// What a fresh run's `primary.h5` records of itself at its start.
fn run_meta(
    world: &SimpleCommunicator,
    ctx: &RunContext,
    config: &RecordedConfig,
    start: &StartRecord,
    groups: usize,
) -> RunMeta {
    let preset = &config.preset;
    RunMeta {
        program_version: aiperf_records::version::short(),
        config_json: config.to_json(),
        start_time_s: ctx.t0_s,
        world_size: world.size() as u32,
        groups: groups as u32,
        accelerators: (world.size() - 1) as u32,
        hosts: ctx.hosts.clone(),
        devices: start.devices.clone(),
        platform: start.platform.clone(),
        ceilings: start.ceilings.clone(),
        seed: ctx.seed,
        dataset: start.dataset.name.clone(),
        start_architecture: preset.start.clone(),
        precision: start.precision.clone(),
        dataset_json: serde_json::to_string(&start.dataset).expect("plain data"),
        search_json: serde_json::to_string(&search_record(preset)).expect("plain data"),
    }
}

/// Rank 0's closing line: the run digest a reviewer checks the records against later.
fn log_run_digest(
    digest: &aiperf_records::digest::Digest,
    chains: &[aiperf_records::digest::GroupChain],
    results: &std::path::Path,
) {
    let hex = aiperf_records::digest::hex(digest);
    log::info!(
        "run digest {hex} ({} group chain(s), {} epoch rows): check the records later with `aiperf score {} --digest {hex}`",
        chains.len(),
        chains.iter().map(|c| c.epochs()).sum::<u64>(),
        results.display(),
    );
}

/// The search as this build carries it out, from the functions it runs: the algorithms'
/// names and versions, the warm-up budgets, the patience per round and the first TPE round.
pub fn search_record(preset: &crate::config::Preset) -> SearchRecord {
    let id = |(name, version): (&str, u32)| AlgorithmId {
        name: name.into(),
        version,
    };
    SearchRecord {
        architecture_search: id(crate::search::ARCHITECTURE_SEARCH),
        hpo: id(crate::search::HPO),
        warmup_epochs: (1..=primary::WARMUP_ROUNDS)
            .map(|r| epoch_budget(r, preset.epochs))
            .collect(),
        patience: (1..=8)
            .map(|r| patience(r, preset.patience_scale))
            .collect(),
        tpe_from_round: primary::WARMUP_ROUNDS + 1,
    }
}

/// This rank's role: the primary, a group leader or a member.
pub fn run_role(
    world: &SimpleCommunicator,
    group_comm: Option<&SimpleCommunicator>,
    place: &Placement,
    ctx: &RunContext,
    config: &RecordedConfig,
    start: &StartRecord,
) -> anyhow::Result<()> {
    let rank = world.rank() as usize;
    match (place.layout.group_of[rank], group_comm) {
        (None, _) => run_primary(world, place, ctx, config, start),
        (Some(g), Some(gc)) if place.layout.leaders[g as usize] == rank => {
            primary_gone(g, rank, group::leader(world, gc, g, ctx))
        }
        (Some(g), Some(gc)) => primary_gone(g, rank, group::member(gc, ctx)),
        (Some(g), None) => anyhow::bail!("rank {rank} got no communicator for group {g}"),
    }
}

/// A group rank whose primary stopped answering ends the whole job with `MPI_Abort`: where
/// the launcher still reaches this host that stops every rank; on a host cut off from it,
/// this rank's own end (the launcher's daemon cannot be told), so that no rank there goes
/// on training and writing records alone.
fn primary_gone(g: u32, rank: usize, r: Result<(), group::GroupError>) -> anyhow::Result<()> {
    match r {
        Err(group::GroupError::PrimaryGone(why)) => {
            log::error!("group {g} (rank {rank}): {why}; ending the job (MPI_Abort)");
            abort_job(75)
        }
        r => Ok(r?),
    }
}
