//! Rank 0's half of `aiperf audit` before any training (docs/design.md §5): the sealed
//! records, the dataset checked against the recorded identity, the sample drawn from the
//! reviewer's randomness and the run digest, the trial holding the best accuracy added, and
//! the audit's mode chosen from the platform fingerprints.

use std::path::Path;

use aiperf_records::audit;
use aiperf_records::platform::{Fingerprint, PlatformEntry};
use aiperf_records::schema::EpochRow;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::DataDiffers;
use crate::cli::{AuditArgs, ModeChoice};
use crate::config::RecordedConfig;
use crate::data::open_split;
use crate::seeds::mix;
use crate::train::schedule::epoch_budget;

/// One trial as every rank needs it to train it again.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Planned {
    pub group: u32,
    pub model_id: u64,
    pub graph_json: String,
    pub batch_size: u32,
    pub kernel_size: u32,
    pub seed: u64,
    pub budget: u32,
    /// The group's ranks in the run.
    pub ranks: u32,
    /// Epochs to re-train.
    pub epochs: u32,
}

/// The audit's plan, the same on every rank.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Plan {
    pub config_json: String,
    pub run_digest: String,
    /// The run's dataset identity (JSON): the packs must be these.
    pub dataset_json: String,
    pub draw: u64,
    pub sample_seed: u64,
    /// The run's threads per rank.
    pub run_threads: usize,
    /// The run's platform (`None`: its records do not name it).
    pub platform: Option<Vec<PlatformEntry>>,
    /// The records' schema version.
    pub schema_version: u32,
    pub trials: Vec<Planned>,
}

/// What rank 0 keeps of one planned trial's records to compare with.
pub(super) struct RecordedTrial {
    /// Its recorded epochs, up to those re-trained.
    pub rows: Vec<EpochRow>,
    /// Their durations, seconds.
    pub durations: Vec<f64>,
    /// Its early steps' recorded global training losses, in step order (schema 7).
    pub steps: Vec<f64>,
}

/// Every planned trial's records, in plan order.
pub(super) type Recorded = Vec<RecordedTrial>;

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

/// A fresh draw from the operating system's randomness.
fn fresh_draw() -> anyhow::Result<u64> {
    use std::io::Read;
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom for the audit's draw (give one with --draw)")?;
    Ok(u64::from_le_bytes(b))
}

/// Each epoch's duration: from the previous epoch's completion, or from the trial's start.
fn durations(rows: &[EpochRow], start_s: f64) -> Vec<f64> {
    let mut last = start_s;
    rows.iter()
        .map(|r| {
            let d = r.time_s - last;
            last = r.time_s;
            d
        })
        .collect()
}

/// Rank 0: the sealed records, the sample and every sampled trial's recorded epochs.
pub(super) fn plan(args: &AuditArgs) -> anyhow::Result<(Plan, Recorded)> {
    let dir = &args.dir;
    let out = dir.join(audit::AUDIT_FILE);
    // A link counts as there, dangling or not: the audit would be written through it.
    if out.symlink_metadata().is_ok() {
        if !out.exists() {
            bail!(
                "{}: a link to {}, which does not exist: an audit is written to a new file of its own; remove the link to audit",
                out.display(),
                std::fs::read_link(&out).map_or_else(|_| "?".into(), |t| t.display().to_string())
            );
        }
        // Refused before anything is re-trained.
        bail!(
            "{}: exists: an audit is never replaced; move it away to audit again",
            out.display()
        );
    }
    let run = aiperf_records::read_run(dir).with_context(|| format!("audit {}", dir.display()))?;
    let hex = sealed_digest(&run, dir)?;
    let digest = aiperf_records::digest::parse_hex(&hex, aiperf_records::digest::Wanted::Run)
        .map_err(anyhow::Error::msg)?;
    let config: RecordedConfig = serde_json::from_str(&run.info.config_json)
        .with_context(|| format!("audit {}: the recorded configuration", dir.display()))?;
    if config.trainer != crate::config::TrainerKind::Real {
        bail!(
            "audit {}: the run used the {:?} trainer: only real training can be re-trained",
            dir.display(),
            config.trainer
        );
    }
    check_data(args, &config, &run.info.dataset_json)?;
    let draw = match args.draw {
        Some(d) => d,
        None => fresh_draw()?,
    };
    let seed = audit::sample_seed(&digest, draw);
    let mut picked: Vec<(usize, u32)> = audit::sample(&run.trials, args.trials, seed)
        .into_iter()
        .map(|i| (i, args.epochs))
        .collect();
    if let Some((i, epoch)) = audit::best_trial(&run) {
        match picked.iter_mut().find(|p| p.0 == i) {
            Some(p) => p.1 = p.1.max(epoch),
            None => picked.push((i, epoch)),
        }
    }
    picked.sort_unstable();
    let mut trials = Vec::new();
    let mut recorded = Vec::new();
    for (i, epochs) in picked {
        let (t, rows, start_s) = planned(&run, &config, i, epochs)?;
        recorded.push(RecordedTrial {
            durations: durations(&rows, start_s),
            steps: early_steps(&run, &t),
            rows,
        });
        trials.push(t);
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
        draw,
        sample_seed: seed,
        run_threads: recorded_threads(&run.info.devices),
        platform: run.info.platform.clone(),
        schema_version: run.info.schema_version,
        trials,
    };
    Ok((plan, recorded))
}

/// Trial `i` of `run` planned for `epochs` epochs: what to re-train, its recorded epochs
/// and its start.
fn planned(
    run: &aiperf_records::Run,
    config: &RecordedConfig,
    i: usize,
    epochs: u32,
) -> anyhow::Result<(Planned, Vec<EpochRow>, f64)> {
    let t = &run.trials[i];
    let Some(g) = run.groups.iter().find(|g| g.group == t.group) else {
        bail!(
            "audit: {} of trial {i} is missing",
            aiperf_records::schema::group_file(t.group)
        );
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
    let epochs = epochs.min(rows.len() as u32);
    let p = Planned {
        group: t.group,
        model_id: t.model_id,
        graph_json: graph_json.clone(),
        batch_size: t.batch_size,
        kernel_size: t.kernel_size,
        seed: mix(run.info.seed ^ mix(t.model_id)),
        budget: epoch_budget(t.round + 1, config.preset.epochs),
        ranks: g.ranks,
        epochs,
    };
    Ok((p, rows[..epochs as usize].to_vec(), t.start_s))
}

/// Trial `t`'s recorded early steps: its group's step rows of its model, losses in step
/// order; a step missing from the records is NaN.
fn early_steps(run: &aiperf_records::Run, t: &Planned) -> Vec<f64> {
    let Some(g) = run.groups.iter().find(|g| g.group == t.group) else {
        return Vec::new();
    };
    let mine: Vec<_> = g
        .steps
        .iter()
        .filter(|s| s.model_id == t.model_id)
        .collect();
    let n = mine.iter().map(|s| s.step as usize + 1).max().unwrap_or(0);
    let mut out = vec![f64::NAN; n];
    for s in mine {
        out[s.step as usize] = s.train_loss;
    }
    out
}

/// The packs the audit will read, against the run's recorded identity: other data is the
/// audit's own verdict ([`DataDiffers`]), not an error.
fn check_data(args: &AuditArgs, config: &RecordedConfig, identity: &str) -> anyhow::Result<()> {
    let dir = args.data.clone().unwrap_or_else(|| config.data_dir());
    let train = open_split(&dir, "train")?;
    let val = open_split(&dir, "val")?;
    let want: aiperf_records::rules::DatasetIdentity = serde_json::from_str(identity)?;
    let have = [train.header().crc32, val.header().crc32];
    match want.crc32 {
        Some(w) if w != have => Err(DataDiffers(format!(
            "the run trained on {} with pack CRC-32 {:08x?}; --data {} holds CRC-32 {:08x?}: give the dataset the run trained on",
            want.name,
            w,
            dir.display(),
            have
        ))
        .into()),
        _ => Ok(()),
    }
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

/// The audit's mode and why, from the run's platform and the auditing ranks'
/// (`auditors`), the rank counts (`used` per trial) and threads.
pub(super) fn choose_mode(
    plan: &Plan,
    choice: ModeChoice,
    auditors: &[Fingerprint],
    used: &[u32],
    threads: usize,
) -> (audit::Mode, String) {
    let statistical = |why: String| (audit::Mode::Statistical, why);
    if choice == ModeChoice::Statistical {
        return statistical("asked for with --mode statistical".into());
    }
    let Some(entries) = &plan.platform else {
        return statistical(format!(
            "the records (schema {}) do not name their platform, so bit-exactness cannot be expected",
            plan.schema_version
        ));
    };
    // The run's training ranks: every rank but the primary, rank 0.
    let mut run: Vec<&Fingerprint> = entries
        .iter()
        .filter(|e| e.ranks.iter().any(|&r| r > 0))
        .map(|e| &e.fingerprint)
        .collect();
    run.dedup();
    let mut mine: Vec<&Fingerprint> = auditors.iter().collect();
    mine.sort();
    mine.dedup();
    if run != mine {
        let diff = match (run.first(), mine.first()) {
            (Some(r), Some(m)) if run.len() == 1 && mine.len() == 1 => r.differences(m).join("; "),
            _ => format!(
                "the run had {} platform(s), the audit {}",
                run.len(),
                mine.len()
            ),
        };
        return statistical(format!(
            "another platform than the run's (run ≠ here: {diff})"
        ));
    }
    if let Some((t, u)) = plan.trials.iter().zip(used).find(|(t, u)| t.ranks != **u) {
        return statistical(format!(
            "re-trained on {u} ranks; the run trained model {} on {}",
            t.model_id, t.ranks
        ));
    }
    if threads != plan.run_threads {
        return statistical(format!(
            "{threads} threads per rank; the run used {}",
            plan.run_threads
        ));
    }
    (
        audit::Mode::Exact,
        "the run's platform, rank count and threads: bit-exact".into(),
    )
}
