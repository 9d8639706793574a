//! `aiperf audit DIR`: the benchmark's residual check (docs/design.md §5, as HPL recomputes its
//! residual). Rank 0 reads the sealed records and draws a sample of trials from a seed
//! derived from the run digest; every trial is rebuilt from its recorded architecture,
//! hyperparameters, seed, data order and rank count and trained again for K epochs on the
//! training ranks (ranks 1.., as in the run; rank 0 alone when launched on one); rank 0
//! compares every re-trained epoch with its record — bit-exact when the rank count and
//! threads are the run's, within the documented tolerance otherwise — and writes
//! `audit.h5`, sealed. Exits non-zero when the audit fails.

use std::path::{Path, PathBuf};

use aiperf_records::audit::{self, Audit, AuditRow, Retrained};
use aiperf_records::schema::EpochRow;
use anyhow::{bail, Context};
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::{Communicator, Destination, Source};
use serde::{Deserialize, Serialize};

use super::{agree, init_mpi, Silent};
use crate::arch::Graph;
use crate::cluster::transport::broadcast_value;
use crate::config::RecordedConfig;
use crate::data::open_split;
use crate::ops::OpCount;
use crate::search::Hparams;
use crate::seeds::mix;
use crate::train::schedule::epoch_budget;
use crate::train::{RealTrainer, Trainer, TrialSpec};

/// `aiperf audit`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct AuditArgs {
    /// The run's records folder (results/<run-id>/); audit.h5 is written there.
    pub dir: PathBuf,
    /// Trials to re-train (the sample; more than the run has takes them all).
    #[arg(long, default_value_t = 2)]
    pub trials: usize,
    /// Epochs of each trial to re-train and compare (at most its recorded epochs).
    #[arg(long, default_value_t = 1)]
    pub epochs: u32,
    /// The dataset's folder (default: the one the run recorded, else $AIPERF_DATA/<dataset>).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// CPU threads per rank (default: the run's, from its recorded devices).
    #[arg(long)]
    pub threads: Option<usize>,
}

impl AuditArgs {
    /// Range checks, before any I/O.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.trials == 0 || self.trials > 10_000 {
            bail!("--trials {}: re-train 1 to 10000 trials", self.trials);
        }
        if self.epochs == 0 || self.epochs > 10_000 {
            bail!(
                "--epochs {}: re-train 1 to 10000 epochs per trial",
                self.epochs
            );
        }
        if self.threads.is_some_and(|t| t == 0 || t > 1024) {
            bail!("--threads: 1 to 1024 per rank");
        }
        Ok(())
    }
}

/// An audit that ran and found re-trained epochs that differ from their records: `aiperf
/// audit` exits 6 (the exit status `aiperf score` gives a run whose audit failed).
#[derive(Debug, thiserror::Error)]
#[error("audit FAILED: {0}")]
pub struct AuditFailed(pub String);

/// One trial as every rank needs it to train it again.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Planned {
    group: u32,
    model_id: u64,
    graph_json: String,
    batch_size: u32,
    kernel_size: u32,
    seed: u64,
    budget: u32,
    /// The group's ranks in the run.
    ranks: u32,
    /// Epochs to re-train.
    epochs: u32,
}

/// The audit's plan, the same on every rank.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Plan {
    config_json: String,
    run_digest: String,
    /// The run's dataset identity (JSON): the packs must be these.
    dataset_json: String,
    sample_seed: u64,
    /// The run's threads per rank.
    run_threads: usize,
    trials: Vec<Planned>,
}

/// Threads per rank the run recorded ("cpu (N threads)"), 1 for other devices.
fn recorded_threads(devices: &[String]) -> usize {
    devices
        .iter()
        .find_map(|d| {
            let n = d.strip_prefix("cpu (")?.strip_suffix(" threads)")?;
            n.parse().ok()
        })
        .unwrap_or(1)
}

/// Rank 0: the sealed records, the sample and every sampled trial's recorded epochs.
fn plan(args: &AuditArgs) -> anyhow::Result<(Plan, Vec<Vec<EpochRow>>)> {
    let dir = &args.dir;
    let out = dir.join(audit::AUDIT_FILE);
    if out.exists() {
        // Refused before anything is re-trained.
        bail!(
            "{}: exists: an audit is never replaced; move it away to audit again",
            out.display()
        );
    }
    let run = aiperf_records::read_run(dir).with_context(|| format!("audit {}", dir.display()))?;
    let hex = sealed_digest(&run, dir)?;
    let digest = aiperf_records::digest::parse_hex(&hex).map_err(anyhow::Error::msg)?;
    let config: RecordedConfig = serde_json::from_str(&run.info.config_json)
        .with_context(|| format!("audit {}: the recorded configuration", dir.display()))?;
    if config.trainer != crate::config::TrainerKind::Real {
        bail!(
            "audit {}: the run used the {:?} trainer: only real training can be re-trained",
            dir.display(),
            config.trainer
        );
    }
    let seed = audit::sample_seed(&digest);
    let mut trials = Vec::new();
    let mut recorded = Vec::new();
    for i in audit::sample(&run.trials, args.trials, seed) {
        let t = &run.trials[i];
        let Some(g) = run.groups.iter().find(|g| g.group == t.group) else {
            bail!("audit: group-{}.h5 of trial {i} is missing", t.group);
        };
        let rows: Vec<EpochRow> = g
            .epochs
            .iter()
            .filter(|e| e.model_id == t.model_id)
            .copied()
            .collect();
        let Some(graph_json) = run.architectures.get(&t.model_id) else {
            bail!("audit: model {} has no recorded architecture", t.model_id);
        };
        let epochs = args.epochs.min(rows.len() as u32);
        trials.push(Planned {
            group: t.group,
            model_id: t.model_id,
            graph_json: graph_json.clone(),
            batch_size: t.batch_size,
            kernel_size: t.kernel_size,
            seed: mix(run.info.seed ^ mix(t.model_id)),
            budget: epoch_budget(t.round + 1, config.preset.epochs),
            ranks: g.ranks,
            epochs,
        });
        recorded.push(rows[..epochs as usize].to_vec());
    }
    if trials.is_empty() {
        bail!(
            "audit {}: no trial completed an epoch: nothing to re-train",
            dir.display()
        );
    }
    let plan = Plan {
        config_json: run.info.config_json.clone(),
        run_digest: hex,
        dataset_json: run.info.dataset_json.clone(),
        sample_seed: seed,
        run_threads: recorded_threads(&run.info.devices),
        trials,
    };
    Ok((plan, recorded))
}

/// The run digest of `run`'s records (read from `dir`), if they are sealed and intact: only
/// such records can be audited.
fn sealed_digest(run: &aiperf_records::Run, dir: &Path) -> anyhow::Result<String> {
    let integrity = aiperf_records::integrity::check(run, None);
    let Some(hex) = integrity
        .run_digest
        .clone()
        .filter(|_| integrity.records == "intact")
    else {
        bail!(
            "audit {}: the records are {} ({}): only sealed, intact records can be audited",
            dir.display(),
            integrity.records,
            integrity
                .problems
                .first()
                .or(integrity.notes.first())
                .map_or("no run digest", String::as_str)
        );
    };
    Ok(hex)
}

/// This rank's libtorch trainer over the run's dataset, checked against its identity.
fn trainer(
    args: &AuditArgs,
    config: &RecordedConfig,
    plan: &Plan,
    rank: usize,
) -> anyhow::Result<RealTrainer> {
    let dir = args.data.clone().unwrap_or_else(|| config.data_dir());
    let train = open_split(&dir, "train")?;
    let val = open_split(&dir, "val")?;
    let identity: aiperf_records::rules::DatasetIdentity =
        serde_json::from_str(&plan.dataset_json)?;
    let have = [train.header().crc32, val.header().crc32];
    if identity.crc32.is_some_and(|want| want != have) {
        bail!(
            "--data {}: its packs' CRC-32 {:08x?} are not the run's {:08x?}: give the dataset the run trained on",
            dir.display(),
            have,
            identity.crc32.unwrap_or_default()
        );
    }
    let device = if tch::Cuda::is_available() {
        tch::Device::Cuda(rank.saturating_sub(1) % tch::Cuda::device_count().max(1) as usize)
    } else {
        tch::Device::Cpu
    };
    Ok(RealTrainer {
        cfg: config.preset.train.clone(),
        device,
        train_pack: train,
        val_pack: val,
    })
}

/// Trains `t` again on `comm` (`ranks` ranks); what each epoch gave.
fn retrain(
    comm: &SimpleCommunicator,
    trainer: &RealTrainer,
    t: &Planned,
) -> anyhow::Result<Vec<Retrained>> {
    let size = comm.size() as u32;
    let global = t.batch_size * t.ranks;
    if !global.is_multiple_of(size) {
        bail!(
            "trial of model {}: its global batch of {global} ({} × {} ranks) cannot be split over {size} ranks: audit with {} training ranks",
            t.model_id, t.batch_size, t.ranks, t.ranks
        );
    }
    let graph = Graph::from_json(&t.graph_json)?;
    let count = OpCount::of(&graph)?;
    let spec = TrialSpec {
        graph,
        hparams: Hparams {
            batch_size: global / size,
            kernel_size: t.kernel_size,
        },
        seed: t.seed,
        epochs: t.budget,
    };
    let mut run = trainer.start(comm, &spec, 0)?;
    let mut out = Vec::new();
    for epoch in 1..=t.epochs {
        let e = run.epoch(epoch, &|| false)?;
        let ops = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
        out.push(Retrained {
            train_images: e.train_images,
            steps: e.steps,
            val_images: e.val_images,
            train_ops: ops(count.train_epoch(e.train_images, e.steps)),
            val_ops: ops(count.eval_epoch(e.val_images)),
            train_loss: e.train_loss,
            val_loss: e.val_loss,
            val_accuracy: e.val_accuracy,
        });
    }
    Ok(out)
}

/// Runs the audit.
pub fn audit(args: AuditArgs) -> anyhow::Result<()> {
    let universe = init_mpi()?;
    let world = universe.world();
    let rank = world.rank() as usize;
    let mine = (rank == 0).then(|| plan(&args));
    let (mine, recorded) = match mine {
        Some(Ok((p, r))) => (Some(Ok(p)), r),
        Some(Err(e)) => (Some(Err(format!("{e:#}"))), Vec::new()),
        None => (None, Vec::new()),
    };
    let plan: Result<Plan, String> = broadcast_value(&world, mine.as_ref())?;
    let plan = match plan {
        Ok(p) => p,
        Err(e) if rank == 0 => bail!(e),
        Err(_) => return Err(Silent.into()),
    };
    let config: RecordedConfig = serde_json::from_str(&plan.config_json)?;
    let threads = args.threads.unwrap_or(plan.run_threads);
    tch::set_num_threads(i32::try_from(threads).unwrap_or(i32::MAX));
    let trainers: Vec<usize> = if world.size() > 1 {
        (1..world.size() as usize).collect()
    } else {
        vec![0]
    };
    let built = if trainers.contains(&rank) {
        trainer(&args, &config, &plan, rank).map(Some)
    } else {
        Ok(None)
    };
    let trainer = agree(&world, built)?;
    let mut results = Vec::new();
    for t in &plan.trials {
        let used = &trainers[..(t.ranks as usize).min(trainers.len())];
        let color = if used.contains(&rank) {
            Color::with_value(0)
        } else {
            Color::undefined()
        };
        let comm = world.split_by_color(color);
        let leader = used[0] as i32;
        let got = match (&comm, &trainer) {
            (Some(c), Some(tr)) => Some(retrain(c, tr, t)),
            _ => None,
        };
        if let Some(Err(e)) = &got {
            eprintln!("aiperf: error: audit: rank {rank}: {e:#}");
            world.abort(1);
        }
        let got = got.and_then(Result::ok);
        if rank == leader as usize && leader != 0 {
            let bytes = bincode::serde::encode_to_vec(&got, bincode::config::standard())?;
            world.process_at_rank(0).send(&bytes[..]);
        }
        if rank == 0 {
            let retrained = if leader == 0 {
                got.unwrap_or_default()
            } else {
                let (bytes, _) = world.process_at_rank(leader).receive_vec::<u8>();
                let (v, _): (Option<Vec<Retrained>>, usize) =
                    bincode::serde::decode_from_slice(&bytes, bincode::config::standard())?;
                v.unwrap_or_default()
            };
            results.push((used.len() as u32, retrained));
        }
    }
    if rank != 0 {
        return Ok(());
    }
    finish(&args, &plan, threads, &recorded, &results)
}

/// Rank 0: compares, writes `audit.h5`, prints the table; errs when the audit failed.
fn finish(
    args: &AuditArgs,
    plan: &Plan,
    threads: usize,
    recorded: &[Vec<EpochRow>],
    results: &[(u32, Vec<Retrained>)],
) -> anyhow::Result<()> {
    let mut rows: Vec<AuditRow> = Vec::new();
    let mut modes = Vec::new();
    for ((t, rec), (used, got)) in plan.trials.iter().zip(recorded).zip(results) {
        let exact = *used == t.ranks && threads == plan.run_threads;
        modes.push(if exact {
            "bit-exact".to_string()
        } else {
            format!(
                "tolerance |Δ accuracy| ≤ {}, |Δ loss| ≤ {} relative (re-trained on {used} ranks × {threads} threads; the run used {} × {})",
                audit::ACCURACY_TOLERANCE,
                audit::LOSS_TOLERANCE,
                t.ranks,
                plan.run_threads
            )
        });
        for (r, a) in rec.iter().zip(got) {
            rows.push(audit::compare(t.group, r, a, exact));
        }
    }
    modes.dedup();
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| r.agrees == 0)
        .map(audit::differences)
        .collect();
    let a = Audit {
        run_digest: plan.run_digest.clone(),
        sample_seed: plan.sample_seed,
        trials: plan.trials.len() as u32,
        epochs: args.epochs,
        ranks: results.iter().map(|r| r.0).max().unwrap_or(0),
        threads: threads as u32,
        mode: modes.join("; "),
        verdict: if failed.is_empty() {
            "PASSED"
        } else {
            "FAILED"
        }
        .into(),
        rows,
    };
    let path = args.dir.join(audit::AUDIT_FILE);
    let sealed = a.write(&path)?;
    print!("{}", aiperf_records::report::audit_text(&a));
    println!(
        "audit digest {} in {}",
        aiperf_records::digest::hex(&sealed),
        path.display()
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(AuditFailed(failed.join("; ")).into())
    }
}
