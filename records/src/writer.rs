//! Writing the records: chunked, resizable datasets appended and flushed one row at a time,
//! so a crash loses at most the row being written.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, Extent, File, H5Type};

use crate::digest::{self, Digest, GroupChain};
use crate::error::RecordError;
use crate::schema::{
    attr, group_file, EpochRow, MonitorRow, TpeRow, TraceRow, TrialRow, PRIMARY_FILE,
    RULES_VERSION, SCHEMA_VERSION,
};

/// Rows per chunk of every dataset.
const CHUNK_ROWS: usize = 256;

/// What the primary records about the run before it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct RunMeta {
    /// aiperf's version.
    pub program_version: String,
    /// Resolved configuration, JSON.
    pub config_json: String,
    /// t0, Unix seconds.
    pub start_time_s: f64,
    /// MPI world size.
    pub world_size: u32,
    /// Replica groups.
    pub groups: u32,
    /// Accelerators (training ranks).
    pub accelerators: u32,
    /// Host names.
    pub hosts: Vec<String>,
    /// Devices.
    pub devices: Vec<String>,
    /// Seed.
    pub seed: u64,
    /// Dataset name.
    pub dataset: String,
    /// Start architecture.
    pub start_architecture: String,
    /// Precision.
    pub precision: String,
    /// The dataset identity from the packs' headers, JSON ([`crate::rules::DatasetIdentity`]).
    pub dataset_json: String,
    /// The search as run, JSON ([`crate::rules::SearchRecord`]).
    pub search_json: String,
}

fn h5(path: &Path) -> impl Fn(hdf5::Error) -> RecordError + '_ {
    move |e| RecordError::Hdf5 {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn text(s: &str) -> VarLenUnicode {
    s.parse()
        .expect("any UTF-8 text without NUL is a valid HDF5 string")
}

fn write_attr<T: H5Type>(
    file: &File,
    path: &Path,
    name: &str,
    value: &T,
) -> Result<(), RecordError> {
    file.new_attr::<T>()
        .create(name)
        .and_then(|a| a.write_scalar(value))
        .map_err(h5(path))
}

fn write_text_attr(file: &File, path: &Path, name: &str, value: &str) -> Result<(), RecordError> {
    write_attr(file, path, name, &text(&value.replace('\0', "")))
}

fn table<T: H5Type>(file: &File, path: &Path, name: &str) -> Result<Dataset, RecordError> {
    file.new_dataset::<T>()
        .chunk(CHUNK_ROWS)
        .shape(Extent::resizable(0))
        .create(name)
        .map_err(h5(path))
}

/// Appends rows and flushes the file.
fn append_rows<T: H5Type>(
    file: &File,
    path: &Path,
    ds: &Dataset,
    rows: &[T],
) -> Result<(), RecordError> {
    let n = ds.size();
    ds.resize(n + rows.len()).map_err(h5(path))?;
    ds.write_slice(rows, n..n + rows.len()).map_err(h5(path))?;
    file.flush().map_err(h5(path))
}

/// Appends one row and flushes the file.
fn append<T: H5Type>(file: &File, path: &Path, ds: &Dataset, row: &T) -> Result<(), RecordError> {
    append_rows(file, path, ds, std::slice::from_ref(row))
}

/// `primary.h5`: run attributes, trials, architectures, TPE observations.
pub struct PrimaryWriter {
    path: PathBuf,
    file: File,
    trials: Dataset,
    arch_ids: Dataset,
    arch_json: Dataset,
    tpe: Dataset,
}

impl PrimaryWriter {
    /// Creates `dir/primary.h5` (the folder too) with the run's attributes.
    pub fn create(dir: &Path, meta: &RunMeta) -> Result<Self, RecordError> {
        std::fs::create_dir_all(dir).map_err(|e| RecordError::Io {
            path: dir.to_path_buf(),
            source: e,
        })?;
        let path = dir.join(PRIMARY_FILE);
        let file = File::create(&path).map_err(h5(&path))?;
        write_attr(&file, &path, attr::SCHEMA_VERSION, &SCHEMA_VERSION)?;
        write_text_attr(&file, &path, attr::PROGRAM_VERSION, &meta.program_version)?;
        write_text_attr(&file, &path, attr::RULES_VERSION, RULES_VERSION)?;
        write_text_attr(&file, &path, attr::CONFIG, &meta.config_json)?;
        write_attr(&file, &path, attr::START_TIME, &meta.start_time_s)?;
        write_attr(&file, &path, attr::WORLD_SIZE, &meta.world_size)?;
        write_attr(&file, &path, attr::GROUPS, &meta.groups)?;
        write_attr(&file, &path, attr::ACCELERATORS, &meta.accelerators)?;
        write_text_attr(
            &file,
            &path,
            attr::HOSTS,
            &serde_json::to_string(&meta.hosts).expect("strings"),
        )?;
        write_text_attr(
            &file,
            &path,
            attr::DEVICES,
            &serde_json::to_string(&meta.devices).expect("strings"),
        )?;
        write_attr(&file, &path, attr::SEED, &meta.seed)?;
        write_text_attr(&file, &path, attr::DATASET, &meta.dataset)?;
        write_text_attr(&file, &path, attr::START_ARCH, &meta.start_architecture)?;
        write_text_attr(&file, &path, attr::PRECISION, &meta.precision)?;
        write_text_attr(&file, &path, attr::DATASET_IDENTITY, &meta.dataset_json)?;
        write_text_attr(&file, &path, attr::SEARCH, &meta.search_json)?;
        let trials = table::<TrialRow>(&file, &path, "trials")?;
        let arch_ids = table::<u64>(&file, &path, "architecture_ids")?;
        let arch_json = table::<VarLenUnicode>(&file, &path, "architectures")?;
        let tpe = table::<TpeRow>(&file, &path, "tpe")?;
        file.flush().map_err(h5(&path))?;
        Ok(PrimaryWriter {
            path,
            file,
            trials,
            arch_ids,
            arch_json,
            tpe,
        })
    }

    /// Reopens `dir/primary.h5` of a stopped or crashed run to go on appending
    /// (`aiperf run --resume`): clears its end time and records the resumption
    /// (`stopped_s`: its last record; `resumed_s`: now) in the `resumes` attribute.
    pub fn reopen(dir: &Path, stopped_s: f64, resumed_s: f64) -> Result<Self, RecordError> {
        let path = dir.join(PRIMARY_FILE);
        let file = File::open_rw(&path).map_err(h5(&path))?;
        let mut resumes: Vec<(f64, f64)> = match file.attr(attr::RESUMES) {
            Ok(a) => {
                let t: VarLenUnicode = a.read_scalar().map_err(h5(&path))?;
                serde_json::from_str(t.as_str()).map_err(|e| RecordError::Hdf5 {
                    path: path.clone(),
                    message: format!("attribute \"resumes\": {e}"),
                })?
            }
            Err(_) => Vec::new(),
        };
        resumes.push((stopped_s, resumed_s));
        for name in [
            attr::END_TIME,
            attr::RESUMES,
            attr::GROUP_DIGESTS,
            attr::RUN_DIGEST,
        ] {
            if file.attr(name).is_ok() {
                file.delete_attr(name).map_err(h5(&path))?;
            }
        }
        write_text_attr(
            &file,
            &path,
            attr::RESUMES,
            &serde_json::to_string(&resumes).expect("numbers"),
        )?;
        let ds = |name: &str| file.dataset(name).map_err(h5(&path));
        let (trials, arch_ids, arch_json, tpe) = (
            ds("trials")?,
            ds("architecture_ids")?,
            ds("architectures")?,
            ds("tpe")?,
        );
        file.flush().map_err(h5(&path))?;
        Ok(PrimaryWriter {
            path,
            file,
            trials,
            arch_ids,
            arch_json,
            tpe,
        })
    }

    /// Records a finished (or stopped) trial.
    pub fn append_trial(&self, row: &TrialRow) -> Result<(), RecordError> {
        append(&self.file, &self.path, &self.trials, row)
    }

    /// Records a model's architecture (its IR JSON).
    pub fn append_architecture(&self, model_id: u64, json: &str) -> Result<(), RecordError> {
        append(&self.file, &self.path, &self.arch_json, &text(json))?;
        append(&self.file, &self.path, &self.arch_ids, &model_id)
    }

    /// Records a TPE observation.
    pub fn append_tpe(&self, row: &TpeRow) -> Result<(), RecordError> {
        append(&self.file, &self.path, &self.tpe, row)
    }

    /// A text attribute of this file.
    fn text_attr(&self, name: &str) -> Result<String, RecordError> {
        let a = self.file.attr(name).map_err(h5(&self.path))?;
        let t: VarLenUnicode = a.read_scalar().map_err(h5(&self.path))?;
        Ok(t.as_str().to_owned())
    }

    /// Marks a clean end of the run at `end_time_s`, records the groups' chains and the
    /// run digest over them ([`crate::digest::run_digest`]), closes the file and returns
    /// the run digest.
    pub fn finish(self, end_time_s: f64, chains: &[GroupChain]) -> Result<Digest, RecordError> {
        let p = &self.path;
        write_attr(&self.file, p, attr::END_TIME, &end_time_s)?;
        let chains_json = serde_json::to_string(chains).expect("plain data");
        write_text_attr(&self.file, p, attr::GROUP_DIGESTS, &chains_json)?;
        let start: f64 = self
            .file
            .attr(attr::START_TIME)
            .and_then(|a| a.read_scalar())
            .map_err(h5(p))?;
        let run = digest::run_digest(
            &self.text_attr(attr::RULES_VERSION)?,
            &self.text_attr(attr::CONFIG)?,
            &self.text_attr(attr::DATASET_IDENTITY)?,
            &self.text_attr(attr::SEARCH)?,
            start,
            chains,
        );
        write_text_attr(&self.file, p, attr::RUN_DIGEST, &digest::hex(&run))?;
        self.file.flush().map_err(h5(p))?;
        Ok(run)
    }
}

/// `group-<g>.h5`: a group's epochs and monitor samples. It seals each epoch row into the
/// group's digest chain as it appends it.
pub struct GroupWriter {
    path: PathBuf,
    file: File,
    epochs: Dataset,
    monitor: Dataset,
    trace: Dataset,
    group: u32,
    /// The chain's last digest and its rows.
    chain: Cell<(Digest, u64)>,
}

impl GroupWriter {
    /// Creates `dir/group-<g>.h5`.
    pub fn create(dir: &Path, group: u32, accelerators: u32) -> Result<Self, RecordError> {
        let path = dir.join(group_file(group));
        let file = File::create(&path).map_err(h5(&path))?;
        write_attr(&file, &path, attr::SCHEMA_VERSION, &SCHEMA_VERSION)?;
        write_attr(&file, &path, "group", &group)?;
        write_attr(&file, &path, attr::ACCELERATORS, &accelerators)?;
        let epochs = table::<EpochRow>(&file, &path, "epochs")?;
        let monitor = table::<MonitorRow>(&file, &path, "monitor")?;
        let trace = table::<TraceRow>(&file, &path, "trace")?;
        file.flush().map_err(h5(&path))?;
        Ok(GroupWriter {
            path,
            file,
            epochs,
            monitor,
            trace,
            group,
            chain: Cell::new((digest::chain_seed(group), 0)),
        })
    }

    /// Opens `dir/group-<g>.h5` to go on appending (a resumed run), or creates it.
    pub fn open_or_create(dir: &Path, group: u32, accelerators: u32) -> Result<Self, RecordError> {
        let path = dir.join(group_file(group));
        if !path.is_file() {
            return GroupWriter::create(dir, group, accelerators);
        }
        let file = File::open_rw(&path).map_err(h5(&path))?;
        let epochs = file.dataset("epochs").map_err(h5(&path))?;
        let monitor = file.dataset("monitor").map_err(h5(&path))?;
        let trace = file.dataset("trace").map_err(h5(&path))?;
        // The chain goes on from the last row written before the stop.
        let rows: Vec<EpochRow> = epochs.read_raw().map_err(h5(&path))?;
        let chain = (digest::last(group, &rows), rows.len() as u64);
        Ok(GroupWriter {
            path,
            file,
            epochs,
            monitor,
            trace,
            group,
            chain: Cell::new(chain),
        })
    }

    /// Records a completed epoch (its `digest` is filled in here).
    pub fn append_epoch(&self, row: &EpochRow) -> Result<(), RecordError> {
        self.append_epochs(std::slice::from_ref(row))
    }

    /// Records several completed epochs at once (one flush), e.g. when replaying records.
    pub fn append_epochs(&self, rows: &[EpochRow]) -> Result<(), RecordError> {
        let (prev, n) = self.chain.get();
        let mut sealed = rows.to_vec();
        let last = digest::seal(prev, &mut sealed);
        append_rows(&self.file, &self.path, &self.epochs, &sealed)?;
        self.chain.set((last, n + rows.len() as u64));
        Ok(())
    }

    /// The chain so far, as the primary records it at a clean stop.
    pub fn chain(&self) -> GroupChain {
        let (last, epochs) = self.chain.get();
        GroupChain {
            group: self.group,
            epochs,
            digest: digest::hex(&last),
        }
    }

    /// Records traced spans (`--trace-steps`).
    pub fn append_trace(&self, rows: &[TraceRow]) -> Result<(), RecordError> {
        if rows.is_empty() {
            return Ok(());
        }
        append_rows(&self.file, &self.path, &self.trace, rows)
    }

    /// Records a monitor sample.
    pub fn append_monitor(&self, row: &MonitorRow) -> Result<(), RecordError> {
        append(&self.file, &self.path, &self.monitor, row)
    }
}
