//! Reading a run's records back, checking the schema version, the run's attributes against
//! each other (so that a damaged count cannot send the reader after billions of group
//! files) and every row's values, and collecting warnings (missing groups, a run that did
//! not stop cleanly) for the report. File access itself is guarded in `source`.

use std::path::{Path, PathBuf};

mod legacy;

use legacy::{EpochRowV1, StoredTrial, StoredTrialV2, TpeRowV2};

use crate::digest::{ChainEnd, GroupChain};
use crate::error::RecordError;
use crate::schema::{
    attr, group_file, AttrValue, EpochRow, MonitorRow, StepRow, TpeRow, TraceRow, TrialRow,
    TrialStatus, GROUP_ATTRS, PRIMARY_FILE,
};
use crate::source::Source;

/// The run attributes the scorer needs.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RunInfo {
    /// aiperf's version that wrote the run.
    pub program_version: String,
    /// Rules version recorded.
    pub rules_version: String,
    /// t0, Unix seconds.
    pub start_time_s: f64,
    /// Clean end, if recorded.
    pub end_time_s: Option<f64>,
    /// MPI world size.
    pub world_size: u32,
    /// Replica groups.
    pub groups: u32,
    /// Accelerators.
    pub accelerators: u32,
    /// Dataset.
    pub dataset: String,
    /// Start architecture.
    pub start_architecture: String,
    /// Precision.
    pub precision: String,
    /// `[stopped_s, resumed_s]` of every resumption (empty for a run never resumed).
    pub resumes: Vec<(f64, f64)>,
    /// Every rank's host (rank 0 first).
    pub hosts: Vec<String>,
    /// The records' schema version (1 is read, but cannot be verified).
    pub schema_version: u32,
    /// The recorded configuration, JSON text.
    pub config_json: String,
    /// The dataset identity, JSON text (`null` in schema 1).
    pub dataset_json: String,
    /// The search record, JSON text (`null` in schema 1).
    pub search_json: String,
    /// Every rank's device (rank 0 first: `primary`).
    pub devices: Vec<String>,
    /// The run's seed.
    pub seed: u64,
    /// One entry per distinct platform among the ranks (schema 4); `None`: not recorded.
    pub platform: Option<Vec<crate::platform::PlatformEntry>>,
    /// Each accelerator's measured ceiling (schema 5); `None`: not recorded.
    pub ceilings: Option<Vec<crate::ceiling::Ceiling>>,
    /// The groups' chains recorded at a clean stop (schema 3).
    pub group_chains: Option<Vec<GroupChain>>,
    /// The primary's own datasets' chains recorded at a clean stop (schema 3).
    pub primary_chains: Option<Vec<ChainEnd>>,
    /// The run digest recorded at a clean stop, hex.
    pub run_digest: Option<String>,
    /// Every sealed attribute as stored, in [`crate::schema::PRIMARY_ATTRS`] order (the run
    /// digest's input).
    #[serde(skip)]
    pub sealed: Vec<(&'static str, Option<AttrValue>)>,
    /// Attributes of `primary.h5` that the schema does not have (nothing seals them).
    pub unsealed: Vec<String>,
}

/// One group's records.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupRecords {
    /// Group number.
    pub group: u32,
    /// Ranks in the group (its file's `accelerators` attribute): a group of one exchanges
    /// nothing.
    pub ranks: u32,
    /// Completed epochs.
    pub epochs: Vec<EpochRow>,
    /// Monitor samples.
    pub monitor: Vec<MonitorRow>,
    /// Traced spans (`--trace-steps`; none in schema 1).
    pub trace: Vec<TraceRow>,
    /// Every trial's early steps' global training losses (schema 7; none before).
    pub steps: Vec<StepRow>,
    /// Attributes of the file that the schema does not have (nothing seals them).
    pub unsealed: Vec<String>,
}

/// A run read back.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The run folder.
    pub dir: PathBuf,
    /// Its attributes.
    pub info: RunInfo,
    /// Trials recorded by the primary.
    pub trials: Vec<TrialRow>,
    /// Groups whose records were found.
    pub groups: Vec<GroupRecords>,
    /// Problems that do not prevent scoring but qualify it.
    pub warnings: Vec<String>,
    /// Records that are missing or do not belong (group files absent, or present beyond
    /// the `groups` attribute): each makes the result invalid.
    pub missing: Vec<String>,
    /// Every registered architecture (IR JSON) by model id, for the recount of operations.
    pub architectures: std::collections::BTreeMap<u64, String>,
    /// The architectures as recorded, in order (model id, IR JSON): their chain.
    pub architecture_rows: Vec<(u64, String)>,
    /// TPE observations recorded by the primary.
    pub tpe: Vec<TpeRow>,
}

/// A checked trial row, or the field that is wrong and why.
fn check_trial(t: &StoredTrial) -> Result<TrialRow, (&'static str, String)> {
    let status = match t.status.0 {
        0 => TrialStatus::Finished,
        1 => TrialStatus::Stopped,
        2 => TrialStatus::Failed,
        v => {
            return Err((
                "status",
                format!("{v} is not 0 (finished), 1 (stopped) or 2 (failed)"),
            ))
        }
    };
    for (field, v) in [("start_s", t.start_s), ("end_s", t.end_s)] {
        if !v.is_finite() {
            return Err((field, format!("{v} is not a Unix time")));
        }
    }
    Ok(TrialRow {
        model_id: t.model_id,
        father: t.father,
        group: t.group,
        round: t.round,
        batch_size: t.batch_size,
        kernel_size: t.kernel_size,
        epochs: t.epochs,
        best_accuracy: t.best_accuracy,
        reported_accuracy: t.reported_accuracy,
        start_s: t.start_s,
        end_s: t.end_s,
        status,
        digest: t.digest,
    })
}

/// The field of an epoch row that holds an impossible value, and why.
fn check_epoch(r: &EpochRow) -> Option<(&'static str, String)> {
    let fields = [
        ("time_s", r.time_s),
        ("train_loss", r.train_loss),
        ("val_loss", r.val_loss),
        ("val_accuracy", r.val_accuracy),
        ("compute_s", r.compute_s),
        ("allreduce_s", r.allreduce_s),
        ("data_wait_s", r.data_wait_s),
    ];
    if let Some((field, _)) = fields.iter().find(|(_, v)| v.is_nan()) {
        return Some((
            field,
            "NaN, not a number: the row is damaged or was written by a faulty trainer".into(),
        ));
    }
    if !r.time_s.is_finite() || r.time_s <= 0.0 {
        return Some((
            "time_s",
            format!("{} is not a positive Unix time", r.time_s),
        ));
    }
    if !(0.0..=1.0).contains(&r.val_accuracy) {
        return Some((
            "val_accuracy",
            format!("{} is outside [0, 1]", r.val_accuracy),
        ));
    }
    let split = [
        ("compute_s", r.compute_s),
        ("allreduce_s", r.allreduce_s),
        ("data_wait_s", r.data_wait_s),
    ];
    split
        .iter()
        .find(|(_, v)| !(v.is_finite() && *v >= 0.0))
        .map(|(field, v)| (*field, format!("{v} is not a number of seconds ≥ 0")))
}

/// A JSON text attribute, parsed to check it is JSON.
fn json_attr(p: &Source, name: &'static str) -> Result<String, RecordError> {
    let text = p.text(name)?;
    serde_json::from_str::<serde_json::Value>(&text).map_err(|e| RecordError::BadAttribute {
        path: p.path().into(),
        name,
        problem: format!("not JSON ({e})"),
    })?;
    Ok(text)
}

/// The recorded configuration, JSON whose every enumerated setting this aiperf knows
/// ([`crate::recorded`]).
fn config_attr(p: &Source) -> Result<String, RecordError> {
    let text = json_attr(p, attr::CONFIG)?;
    let value = serde_json::from_str(&text).expect("checked JSON");
    crate::recorded::check(&value).map_err(|problem| RecordError::BadAttribute {
        path: p.path().into(),
        name: attr::CONFIG,
        problem,
    })?;
    Ok(text)
}

/// An attribute written only at a clean stop.
fn optional<T>(
    p: &Source,
    name: &str,
    read: impl FnOnce() -> Result<T, RecordError>,
) -> Result<Option<T>, RecordError> {
    if p.has_attr(name) {
        read().map(Some)
    } else {
        Ok(None)
    }
}

/// The attributes of `primary.h5`, checked by [`check_info`]. Schema 1 lacks the dataset
/// identity, the search record and the digests: they read as absent.
fn read_info(p: &Source) -> Result<RunInfo, RecordError> {
    let bad = |name: &'static str, problem: String| RecordError::BadAttribute {
        path: p.path().into(),
        name,
        problem,
    };
    let resumes = optional(p, attr::RESUMES, || {
        serde_json::from_str(&p.text(attr::RESUMES)?)
            .map_err(|e| bad(attr::RESUMES, format!("not a JSON list of pairs ({e})")))
    })?
    .unwrap_or_default();
    let v2 = p.version() >= 2;
    let group_chains = chains(p, attr::GROUP_DIGESTS, "{group, ranks, chains}")?;
    let primary_chains = chains(p, attr::PRIMARY_DIGESTS, "{dataset, rows, digest}")?;
    let sealed = crate::schema::primary_attrs(p.version())
        .map(|s| Ok((s.name, p.attr_value(s)?)))
        .collect::<Result<Vec<_>, RecordError>>()?;
    let unsealed = unsealed(
        p,
        crate::schema::primary_attrs(p.version())
            .map(|s| s.name)
            .chain([attr::RUN_DIGEST]),
    )?;
    let info = RunInfo {
        program_version: p.text(attr::PROGRAM_VERSION)?,
        rules_version: p.text(attr::RULES_VERSION)?,
        start_time_s: p.attr(attr::START_TIME)?,
        end_time_s: optional(p, attr::END_TIME, || p.attr(attr::END_TIME))?,
        world_size: p.attr(attr::WORLD_SIZE)?,
        groups: p.attr(attr::GROUPS)?,
        accelerators: p.attr(attr::ACCELERATORS)?,
        dataset: p.text(attr::DATASET)?,
        start_architecture: p.text(attr::START_ARCH)?,
        precision: p.text(attr::PRECISION)?,
        resumes,
        hosts: serde_json::from_str(&p.text(attr::HOSTS)?)
            .map_err(|e| bad(attr::HOSTS, format!("not a JSON list of strings ({e})")))?,
        schema_version: p.version(),
        config_json: config_attr(p)?,
        dataset_json: if v2 {
            json_attr(p, attr::DATASET_IDENTITY)?
        } else {
            "null".into()
        },
        search_json: if v2 {
            json_attr(p, attr::SEARCH)?
        } else {
            "null".into()
        },
        devices: serde_json::from_str(&p.text(attr::DEVICES)?)
            .map_err(|e| bad(attr::DEVICES, format!("not a JSON list of strings ({e})")))?,
        seed: p.attr(attr::SEED)?,
        platform: if p.version() >= 4 {
            Some(
                crate::platform::parse(&p.text(attr::PLATFORM)?)
                    .map_err(|e| bad(attr::PLATFORM, e))?,
            )
        } else {
            None
        },
        ceilings: if p.version() >= 5 {
            Some(
                crate::ceiling::parse(&p.text(attr::CEILINGS)?)
                    .map_err(|e| bad(attr::CEILINGS, e))?,
            )
        } else {
            None
        },
        group_chains,
        primary_chains,
        run_digest: optional(p, attr::RUN_DIGEST, || p.text(attr::RUN_DIGEST))?,
        sealed,
        unsealed,
    };
    check_info(p, &info)?;
    Ok(info)
}

/// The JSON list of `what` in attribute `name` of a schema-3 file; absent before schema 3.
fn chains<T: serde::de::DeserializeOwned>(
    p: &Source,
    name: &'static str,
    what: &str,
) -> Result<Option<T>, RecordError> {
    if p.version() < 3 {
        return Ok(None);
    }
    optional(p, name, || {
        serde_json::from_str(&p.text(name)?).map_err(|e| RecordError::BadAttribute {
            path: p.path().into(),
            name,
            problem: format!("not a JSON list of {what} ({e})"),
        })
    })
}

/// The attributes of the file that are not among `known`, sorted.
fn unsealed<'a>(
    p: &Source,
    known: impl Iterator<Item = &'a str> + Clone,
) -> Result<Vec<String>, RecordError> {
    let mut out: Vec<String> = p
        .attr_names()?
        .into_iter()
        .filter(|n| !known.clone().any(|k| k == n))
        .collect();
    out.sort();
    Ok(out)
}

/// The attributes' values, and their counts against each other: one host and one device per
/// rank, the primary plus at least one accelerator, and at most one group per accelerator
/// (so that a damaged `groups` cannot send the reader after billions of group files).
fn check_info(p: &Source, info: &RunInfo) -> Result<(), RecordError> {
    let bad = |name: &'static str, problem: String| RecordError::BadAttribute {
        path: p.path().into(),
        name,
        problem,
    };
    if !info.start_time_s.is_finite() || info.start_time_s <= 0.0 {
        let problem = format!("{} is not a Unix time", info.start_time_s);
        return Err(bad(attr::START_TIME, problem));
    }
    if let Some(end) = info.end_time_s.filter(|t| !t.is_finite()) {
        return Err(bad(attr::END_TIME, format!("{end} is not a Unix time")));
    }
    for name in [attr::HOSTS, attr::DEVICES] {
        let entries: Vec<String> = serde_json::from_str(&p.text(name)?)
            .map_err(|e| bad(name, format!("not a JSON list of strings ({e})")))?;
        let entries = entries.len();
        if entries != info.world_size as usize {
            let problem = format!(
                "{entries} entries, but world_size is {} (one entry per rank): the file is damaged",
                info.world_size
            );
            return Err(bad(name, problem));
        }
    }
    if info.accelerators == 0 || info.accelerators >= info.world_size {
        let problem = format!(
            "{}, but a world of {} ranks has the primary and 1 to {} accelerators: the file is damaged",
            info.accelerators,
            info.world_size,
            info.world_size.saturating_sub(1)
        );
        return Err(bad(attr::ACCELERATORS, problem));
    }
    if info.groups == 0 || info.groups > info.accelerators {
        let problem = format!(
            "{}, but {} accelerators make 1 to {} groups: the file is damaged",
            info.groups, info.accelerators, info.accelerators
        );
        return Err(bad(attr::GROUPS, problem));
    }
    Ok(())
}

/// Reads `group-<g>.h5`: its attributes and every row, each checked. Its schema must be
/// the primary's.
fn read_group(
    path: &Path,
    g: u32,
    accelerators: u32,
    version: u32,
) -> Result<GroupRecords, RecordError> {
    let f = Source::open(path)?;
    let bad = |name: &'static str, problem: String| RecordError::BadAttribute {
        path: path.into(),
        name,
        problem,
    };
    if f.version() != version {
        let problem = format!(
            "{}, but primary.h5 has {version}: one run writes every file in one schema, so these \
             files come from two runs or were altered; score the folder the run wrote",
            f.version()
        );
        return Err(bad(attr::SCHEMA_VERSION, problem));
    }
    let recorded: u32 = f.attr("group")?;
    if recorded != g {
        let problem = format!("{recorded}, but the file is {}", group_file(g));
        return Err(bad("group", problem));
    }
    let ranks: u32 = f.attr(attr::ACCELERATORS)?;
    if ranks == 0 || ranks > accelerators {
        let problem =
            format!("{ranks} ranks, but the run has 1 to {accelerators} accelerators per group");
        return Err(bad(attr::ACCELERATORS, problem));
    }
    let epochs = if version >= 2 {
        f.rows::<EpochRow>("epochs")?
    } else {
        let v1 = f.rows::<EpochRowV1>("epochs")?;
        v1.into_iter().map(EpochRow::from).collect()
    };
    for (row, r) in epochs.iter().enumerate() {
        if let Some((field, problem)) = check_epoch(r) {
            return Err(RecordError::BadRow {
                path: path.into(),
                dataset: "epochs",
                row,
                field,
                problem,
            });
        }
    }
    Ok(GroupRecords {
        group: g,
        ranks,
        unsealed: unsealed(&f, GROUP_ATTRS.iter().map(|s| s.name))?,
        epochs,
        monitor: f.rows::<MonitorRow>("monitor")?,
        trace: if version >= 2 {
            f.rows::<TraceRow>("trace")?
        } else {
            Vec::new()
        },
        steps: if version >= 7 {
            f.rows::<StepRow>("steps")?
        } else {
            Vec::new()
        },
    })
}

/// Reads the run in `dir`: `primary.h5` and every `group-<g>.h5` its attributes announce.
pub fn read_run(dir: &Path) -> Result<Run, RecordError> {
    let path = dir.join(PRIMARY_FILE);
    if !path.is_file() {
        return Err(RecordError::NotARun(dir.into()));
    }
    let p = Source::open(&path)?;
    let info = read_info(&p)?;
    let stored: Vec<StoredTrial> = if info.schema_version >= 3 {
        p.rows::<StoredTrial>("trials")?
    } else {
        let v2 = p.rows::<StoredTrialV2>("trials")?;
        v2.into_iter().map(StoredTrial::from).collect()
    };
    let trials = stored
        .iter()
        .enumerate()
        .map(|(row, t)| {
            check_trial(t).map_err(|(field, problem)| RecordError::BadRow {
                path: path.clone(),
                dataset: "trials",
                row,
                field,
                problem,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut warnings = Vec::new();
    if info.end_time_s.is_none() {
        warnings.push("the run did not stop cleanly (no end time): it is scored up to its last completed epoch".into());
    }
    let mut groups = Vec::new();
    let mut missing = Vec::new();
    for g in 0..info.groups {
        let gpath = dir.join(group_file(g));
        if !gpath.is_file() {
            missing.push(format!(
                "{} is missing (primary.h5 records {} groups): the score counts only the other groups' work",
                gpath.display(),
                info.groups
            ));
            continue;
        }
        groups.push(read_group(
            &gpath,
            g,
            info.accelerators,
            info.schema_version,
        )?);
    }
    missing.extend(extra_group_files(dir, info.groups));
    let architecture_rows = read_architectures(dir)?;
    Ok(Run {
        dir: dir.into(),
        info,
        trials,
        groups,
        warnings,
        missing,
        architectures: architecture_rows.iter().cloned().collect(),
        architecture_rows,
        tpe: read_tpe(dir)?,
    })
}

/// `group-<g>.h5` files in `dir` with `g` at or beyond the recorded group count.
fn extra_group_files(dir: &Path, groups: u32) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut extra: Vec<(u64, String)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let g: u64 = name.strip_prefix("group-")?.strip_suffix(".h5")?.parse().ok()?;
            (g >= u64::from(groups)).then(|| {
                let text = format!(
                    "{} is present, but primary.h5 records {groups} groups (0 to {}): the groups attribute or the folder was altered",
                    e.path().display(),
                    groups.saturating_sub(1)
                );
                (g, text)
            })
        })
        .collect();
    extra.sort();
    extra.into_iter().map(|(_, t)| t).collect()
}

/// The TPE observations recorded in `dir/primary.h5`, in the order the primary learned them.
pub fn read_tpe(dir: &Path) -> Result<Vec<TpeRow>, RecordError> {
    let p = Source::open(&dir.join(PRIMARY_FILE))?;
    if p.version() >= 3 {
        return p.rows::<TpeRow>("tpe");
    }
    let rows = p.rows::<TpeRowV2>("tpe")?;
    Ok(rows.into_iter().map(TpeRow::from).collect())
}

/// The resolved configuration (JSON) recorded in `dir/primary.h5`.
pub fn read_config(dir: &Path) -> Result<String, RecordError> {
    let path = dir.join(PRIMARY_FILE);
    if !path.is_file() {
        return Err(RecordError::NotARun(dir.into()));
    }
    config_attr(&Source::open(&path)?)
}

/// The architectures recorded in `dir/primary.h5`: (model id, IR JSON) in registration order.
pub fn read_architectures(dir: &Path) -> Result<Vec<(u64, String)>, RecordError> {
    let path = dir.join(PRIMARY_FILE);
    let f = Source::open(&path)?;
    let ids = f.rows::<u64>("architecture_ids")?;
    let json = f.text_rows("architectures")?;
    if ids.len() != json.len() {
        return Err(RecordError::Hdf5 {
            path,
            message: format!(
                "{} architecture ids but {} architectures",
                ids.len(),
                json.len()
            ),
        });
    }
    Ok(ids.into_iter().zip(json).collect())
}
