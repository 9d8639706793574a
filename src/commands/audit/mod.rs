//! `aiperf audit DIR`: the benchmark's residual check (docs/design.md §5, as HPL recomputes its
//! residual). Rank 0 reads the sealed records, checks the dataset against the recorded
//! identity and draws a sample of trials from the reviewer's randomness combined with the run
//! digest, adding the trial that holds the best accuracy ([`plan`]). The ranks compare their
//! platform fingerprints with the run's: on the run's platform, rank count and threads the
//! audit is *exact* (every figure bit-identical); elsewhere *statistical* (each trial
//! re-trained with its recorded seed and further seeds, each recorded figure inside the
//! re-trainings' prediction interval). Every trial is trained again on the training ranks
//! ([`retrain`]); rank 0 judges, writes `audit.h5`, sealed, and prints its audit digest.
//! Exits 6 when the audit fails, 7 when the data differs from the run's.

mod plan;
mod retrain;

use aiperf_records::audit::{self, Audit, AuditRow, AuditStepRow, SeedRow};
use aiperf_records::platform::Fingerprint;
use anyhow::bail;
use mpi::traits::Communicator;

use super::{agree, init_mpi, Silent};
use crate::cli::AuditArgs;
use crate::config::RecordedConfig;
use crate::world::transport::{all_gather_strings, broadcast_value};
use plan::{Plan, Recorded, RecordedTrial};
use retrain::TrialResult;

/// An audit that ran and found re-trained epochs that differ from their records: `aiperf
/// audit` exits 6 (the exit status `aiperf score` gives a run whose verified audit failed).
#[derive(Debug, thiserror::Error)]
#[error("audit FAILED: {0}")]
pub struct AuditFailed(pub String);

/// The packs given are not the data the run trained on: the audit's own verdict, exit 7.
#[derive(Debug, thiserror::Error)]
#[error("audit verdict DATA DIFFERS: {0}")]
pub struct DataDiffers(pub String);

/// What rank 0 decided after seeing every auditing rank's platform.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Decision {
    mode: audit::Mode,
    reason: String,
    /// Re-trainings per trial.
    seeds: u32,
    /// The auditing ranks' fingerprint (JSON).
    platform_json: String,
}

/// The training ranks: 1.. as in the run, or rank 0 alone when launched on one.
fn training_ranks(size: usize) -> Vec<usize> {
    if size > 1 {
        (1..size).collect()
    } else {
        vec![0]
    }
}

/// Collective: every rank's fingerprint; rank 0 chooses the mode (an error when `--timed`
/// cannot be exact) and tells every rank.
fn decide(
    world: &mpi::topology::SimpleCommunicator,
    args: &AuditArgs,
    plan: &Plan,
    threads: usize,
) -> anyhow::Result<Decision> {
    let mine = crate::fingerprint::this_rank(threads);
    let all = all_gather_strings(world, &serde_json::to_string(&mine)?);
    let trainers = training_ranks(world.size() as usize);
    let decided = (world.rank() == 0).then(|| -> Result<Decision, String> {
        let auditors: Vec<Fingerprint> = trainers
            .iter()
            .map(|&r| serde_json::from_str(&all[r]).map_err(|e| format!("rank {r}'s fingerprint: {e}")))
            .collect::<Result<_, _>>()?;
        let used: Vec<u32> = plan
            .trials
            .iter()
            .map(|t| (t.ranks as usize).min(trainers.len()) as u32)
            .collect();
        let (mode, reason) = plan::choose_mode(plan, args.mode, &auditors, &used, threads);
        if args.timed && mode != audit::Mode::Exact {
            return Err(format!("--timed confirms throughput on the run's own machine, and this audit cannot be exact: {reason}"));
        }
        let seeds = match mode {
            audit::Mode::Exact if !args.timed => 1,
            _ => args.seeds,
        };
        Ok(Decision {
            mode,
            reason,
            seeds,
            platform_json: serde_json::to_string(&auditors[0]).expect("plain data"),
        })
    });
    match broadcast_value(world, decided.as_ref())? {
        Ok(d) => Ok(d),
        Err(e) if world.rank() == 0 => bail!(e),
        Err(_) => Err(Silent.into()),
    }
}

/// Runs the audit.
pub fn audit(args: AuditArgs) -> anyhow::Result<()> {
    let (universe, level) = init_mpi()?;
    let world = universe.world();
    let rank = world.rank() as usize;
    let mine = (rank == 0).then(|| plan::plan(&args));
    let (mine, recorded, differs) = match mine {
        Some(Ok((p, r))) => (Some(Ok(p)), r, None),
        Some(Err(e)) if e.is::<DataDiffers>() => (Some(Err(format!("{e:#}"))), Vec::new(), Some(e)),
        Some(Err(e)) => (Some(Err(format!("{e:#}"))), Vec::new(), None),
        None => (None, Vec::new(), None),
    };
    let plan: Result<Plan, String> = broadcast_value(&world, mine.as_ref())?;
    let plan = match plan {
        Ok(p) => p,
        Err(_) if differs.is_some() => return Err(differs.expect("checked")),
        Err(e) if rank == 0 => bail!(e),
        Err(_) => return Err(Silent.into()),
    };
    let mut config: RecordedConfig = serde_json::from_str(&plan.config_json)?;
    // The overlap changes when buckets are reduced, never their sums.
    let x = &mut config.preset.train.exchange;
    *x = x.within(level);
    let threads = args.threads.unwrap_or(plan.run_threads);
    tch::set_num_threads(i32::try_from(threads).unwrap_or(i32::MAX));
    let decision = decide(&world, &args, &plan, threads)?;
    let trainers = training_ranks(world.size() as usize);
    let built = if trainers.contains(&rank) {
        retrain::trainer(&args, &config, &plan, rank).map(Some)
    } else {
        Ok(None)
    };
    let trainer = agree(&world, built)?;
    let same_seed = decision.mode == audit::Mode::Exact;
    let results = retrain::all(
        &world,
        &plan,
        trainer.as_ref(),
        &trainers,
        decision.seeds,
        same_seed,
    )?;
    if rank != 0 {
        return Ok(());
    }
    finish(&args, &plan, &decision, threads, &recorded, &results)
}

/// Trial `t`'s early steps beside their re-training with the recorded seed (as many as it
/// re-trained; a step the records lack is NaN).
fn steps_beside(t: &plan::Planned, rec: &RecordedTrial, got: &TrialResult) -> Vec<AuditStepRow> {
    let Some(first) = got.runs.first() else {
        return Vec::new();
    };
    (first.early.iter().enumerate())
        .map(|(i, &re)| AuditStepRow {
            group: t.group,
            model_id: t.model_id,
            step: i as u32,
            train_loss: [rec.steps.get(i).copied().unwrap_or(f64::NAN), re],
            digest: [0; 32],
        })
        .collect()
}

/// Rank 0: sets records beside re-trainings, judges, writes `audit.h5`, prints the table
/// and the audit digest; errs when the audit failed.
fn finish(
    args: &AuditArgs,
    plan: &Plan,
    decision: &Decision,
    threads: usize,
    recorded: &Recorded,
    results: &[TrialResult],
) -> anyhow::Result<()> {
    let mut rows: Vec<AuditRow> = Vec::new();
    let mut seed_rows: Vec<SeedRow> = Vec::new();
    let mut step_rows: Vec<AuditStepRow> = Vec::new();
    let same = decision.mode == audit::Mode::Exact;
    for ((t, rec), got) in plan.trials.iter().zip(recorded).zip(results) {
        if plan.schema_version >= 7 && got.ranks == t.ranks {
            step_rows.extend(steps_beside(t, rec, got));
        }
        let (rec, secs) = (&rec.rows, &rec.durations);
        for (k, run) in got.runs.iter().map(|r| &r.epochs).enumerate() {
            for ((r, a), s) in rec.iter().zip(run).zip(secs) {
                if k == 0 {
                    rows.push(audit::row(t.group, r, a, *s));
                } else {
                    let seed = retrain::seed_of(t.seed, k as u32, same);
                    seed_rows.push(audit::seed_row(t.group, r, k as u32, seed, a));
                }
            }
        }
    }
    let mut a = Audit {
        run_digest: plan.run_digest.clone(),
        draw: plan.draw,
        sample_seed: plan.sample_seed,
        trials: plan.trials.len() as u32,
        epochs: args.epochs,
        ranks: results.iter().map(|r| r.ranks).max().unwrap_or(0),
        threads: threads as u32,
        mode: decision.mode,
        mode_reason: decision.reason.clone(),
        seeds: decision.seeds,
        alpha: args.alpha,
        timed: args.timed,
        platform_json: decision.platform_json.clone(),
        verdict: String::new(),
        rows,
        seed_rows,
        step_rows,
    };
    let judgement = audit::judge(&a);
    a.verdict = judgement.verdict.into();
    let path = args.dir.join(audit::AUDIT_FILE);
    let sealed = a.write(&path)?;
    print!("{}", aiperf_records::report::audit_text(&a, &judgement));
    println!(
        "audit digest {} in {} (draw {:016x}; `aiperf score --audit-digest` shows it verified)",
        aiperf_records::digest::hex(&sealed),
        path.display(),
        a.draw
    );
    if judgement.failures.is_empty() {
        Ok(())
    } else {
        Err(AuditFailed(judgement.failures.join("; ")).into())
    }
}
