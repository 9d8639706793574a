//! Reading a run's records back, checking the schema version and every row's values, and
//! collecting warnings (missing groups, a run that did not stop cleanly) for the report.

use std::path::{Path, PathBuf};

use hdf5::types::VarLenUnicode;
use hdf5::{File, H5Type};

use crate::error::RecordError;
use crate::schema::{
    attr, group_file, EpochRow, MonitorRow, TpeRow, TrialRow, PRIMARY_FILE, SCHEMA_VERSION,
};

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
    /// Fixed algorithms.
    pub fixed_algorithms: bool,
    /// `[stopped_s, resumed_s]` of every resumption (empty for a run never resumed).
    pub resumes: Vec<(f64, f64)>,
}

/// One group's records.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupRecords {
    /// Group number.
    pub group: u32,
    /// Completed epochs.
    pub epochs: Vec<EpochRow>,
    /// Monitor samples.
    pub monitor: Vec<MonitorRow>,
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
}

fn read_attr<T: H5Type>(f: &File, path: &Path, name: &str) -> Result<T, RecordError> {
    f.attr(name)
        .and_then(|a| a.read_scalar::<T>())
        .map_err(|e| RecordError::Hdf5 {
            path: path.into(),
            message: format!("attribute {name:?}: {e}"),
        })
}

fn read_text(f: &File, path: &Path, name: &str) -> Result<String, RecordError> {
    read_attr::<VarLenUnicode>(f, path, name).map(|s| s.as_str().to_string())
}

/// Opens a record file read-only. A writer that just died may still hold its lock for a
/// moment (the kernel releases a dead process's file locks after its descriptors), so a
/// lock conflict is retried for up to 3 s before it is reported.
fn open(path: &Path) -> Result<File, RecordError> {
    let started = std::time::Instant::now();
    let f = loop {
        match File::open(path) {
            Ok(f) => break f,
            Err(e)
                if e.to_string().contains("unable to lock file")
                    && started.elapsed() < std::time::Duration::from_secs(3) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => {
                return Err(RecordError::Hdf5 {
                    path: path.into(),
                    message: format!(
                        "cannot open as HDF5 ({e}); is it a complete aiperf record file? (a run still writing it holds a lock)"
                    ),
                })
            }
        }
    };
    let version: u32 = read_attr(&f, path, attr::SCHEMA_VERSION)?;
    if version != SCHEMA_VERSION {
        return Err(RecordError::Schema {
            path: path.into(),
            found: version,
            expected: SCHEMA_VERSION,
        });
    }
    Ok(f)
}

fn rows<T: H5Type>(f: &File, path: &Path, name: &str) -> Result<Vec<T>, RecordError> {
    f.dataset(name)
        .and_then(|d| d.read_raw::<T>())
        .map_err(|e| RecordError::Hdf5 {
            path: path.into(),
            message: format!("dataset {name:?}: {e}"),
        })
}

/// Checks an epoch row for impossible values.
fn check_epoch(r: &EpochRow) -> Option<String> {
    let finite = [
        r.time_s,
        r.train_loss,
        r.val_loss,
        r.val_accuracy,
        r.compute_s,
        r.allreduce_s,
        r.data_wait_s,
    ];
    if !r.time_s.is_finite() || r.time_s <= 0.0 {
        return Some(format!("time {} is not a positive Unix time", r.time_s));
    }
    if !(0.0..=1.0).contains(&r.val_accuracy) {
        return Some(format!(
            "validation accuracy {} is outside [0, 1]",
            r.val_accuracy
        ));
    }
    if finite.iter().any(|v| v.is_nan()) {
        return Some("NaN in a time, loss or accuracy".into());
    }
    if [r.compute_s, r.allreduce_s, r.data_wait_s]
        .iter()
        .any(|&v| v < 0.0)
    {
        return Some("negative time split".into());
    }
    None
}

/// Reads the run in `dir`: `primary.h5` and every `group-<g>.h5` its attributes announce.
pub fn read_run(dir: &Path) -> Result<Run, RecordError> {
    let path = dir.join(PRIMARY_FILE);
    if !path.is_file() {
        return Err(RecordError::NotARun(dir.into()));
    }
    let f = open(&path)?;
    let end_time_s = read_attr::<f64>(&f, &path, attr::END_TIME).ok();
    let info = RunInfo {
        program_version: read_text(&f, &path, attr::PROGRAM_VERSION)?,
        rules_version: read_text(&f, &path, attr::RULES_VERSION)?,
        start_time_s: read_attr(&f, &path, attr::START_TIME)?,
        end_time_s,
        world_size: read_attr(&f, &path, attr::WORLD_SIZE)?,
        groups: read_attr(&f, &path, attr::GROUPS)?,
        accelerators: read_attr(&f, &path, attr::ACCELERATORS)?,
        dataset: read_text(&f, &path, attr::DATASET)?,
        start_architecture: read_text(&f, &path, attr::START_ARCH)?,
        precision: read_text(&f, &path, attr::PRECISION)?,
        fixed_algorithms: read_attr::<u8>(&f, &path, attr::FIXED_ALGORITHMS)? != 0,
        resumes: match f.attr(attr::RESUMES) {
            Ok(_) => serde_json::from_str(&read_text(&f, &path, attr::RESUMES)?).map_err(|e| {
                RecordError::Hdf5 {
                    path: path.clone(),
                    message: format!("attribute \"resumes\": {e}"),
                }
            })?,
            Err(_) => Vec::new(),
        },
    };
    if !info.start_time_s.is_finite() || info.start_time_s <= 0.0 {
        return Err(RecordError::Hdf5 {
            path,
            message: format!("start time {} is not a Unix time", info.start_time_s),
        });
    }
    let trials = rows::<TrialRow>(&f, &path, "trials")?;
    let mut warnings = Vec::new();
    if info.end_time_s.is_none() {
        warnings.push("the run did not stop cleanly (no end time): it is scored up to its last completed epoch".into());
    }
    let mut groups = Vec::new();
    for g in 0..info.groups {
        let gpath = dir.join(group_file(g));
        if !gpath.is_file() {
            warnings.push(format!(
                "{} is missing: the score counts only the other groups' work",
                gpath.display()
            ));
            continue;
        }
        let gf = open(&gpath)?;
        let epochs = rows::<EpochRow>(&gf, &gpath, "epochs")?;
        for (i, r) in epochs.iter().enumerate() {
            if let Some(problem) = check_epoch(r) {
                return Err(RecordError::BadRow {
                    path: gpath,
                    dataset: "epochs",
                    row: i,
                    problem,
                });
            }
        }
        let monitor = rows::<MonitorRow>(&gf, &gpath, "monitor")?;
        groups.push(GroupRecords {
            group: g,
            epochs,
            monitor,
        });
    }
    Ok(Run {
        dir: dir.into(),
        info,
        trials,
        groups,
        warnings,
    })
}

/// The TPE observations recorded in `dir/primary.h5`, in the order the primary learned them.
pub fn read_tpe(dir: &Path) -> Result<Vec<TpeRow>, RecordError> {
    let path = dir.join(PRIMARY_FILE);
    let f = open(&path)?;
    rows::<TpeRow>(&f, &path, "tpe")
}

/// The resolved configuration (JSON) recorded in `dir/primary.h5`.
pub fn read_config(dir: &Path) -> Result<String, RecordError> {
    let path = dir.join(PRIMARY_FILE);
    if !path.is_file() {
        return Err(RecordError::NotARun(dir.into()));
    }
    let f = open(&path)?;
    read_text(&f, &path, attr::CONFIG)
}

/// The architectures recorded in `dir/primary.h5`: (model id, IR JSON) in registration order.
pub fn read_architectures(dir: &Path) -> Result<Vec<(u64, String)>, RecordError> {
    let path = dir.join(PRIMARY_FILE);
    let f = open(&path)?;
    let ids = rows::<u64>(&f, &path, "architecture_ids")?;
    let json = rows::<VarLenUnicode>(&f, &path, "architectures")?;
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
    Ok(ids
        .into_iter()
        .zip(json.into_iter().map(|s| s.as_str().to_string()))
        .collect())
}
