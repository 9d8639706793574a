//! Writing the records: chunked, resizable datasets appended and flushed one row at a time,
//! so a crash loses at most the row being written; every dataset chained as it grows
//! ([`crate::digest`]) and the whole of `primary.h5` sealed at a clean stop.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, Extent, File, H5Type};

use crate::digest::{self, Carried, ChainEnd, Digest, GroupChain};
use crate::error::RecordError;
use crate::folder::Claimed;
use crate::schema::{
    attr, group_file, AttrKind, AttrValue, EpochRow, MonitorRow, StepRow, TpeRow, TraceRow,
    TrialRow, PRIMARY_ATTRS, PRIMARY_FILE, RULES_VERSION, SCHEMA_VERSION,
};
use crate::tail::{self, Unwritten};

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
    /// One entry per distinct platform among the ranks ([`crate::platform::entries`]).
    pub platform: Vec<crate::platform::PlatformEntry>,
    /// Each accelerator's measured ceiling ([`crate::ceiling`]).
    pub ceilings: Vec<crate::ceiling::Ceiling>,
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

/// Writes scalar attribute `name` of `file` (at `path`, for messages).
pub(crate) fn write_attr<T: H5Type>(
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

/// Writes text attribute `name` (NUL characters dropped).
pub(crate) fn write_text_attr(
    file: &File,
    path: &Path,
    name: &str,
    value: &str,
) -> Result<(), RecordError> {
    write_attr(file, path, name, &text(&value.replace('\0', "")))
}

fn table<T: H5Type>(file: &File, path: &Path, name: &str) -> Result<Dataset, RecordError> {
    file.new_dataset::<T>()
        .chunk(CHUNK_ROWS)
        .shape(Extent::resizable(0))
        .create(name)
        .map_err(h5(path))
}

/// Appends rows and flushes the file. Where that fails (a full disk, a file-size limit),
/// the dataset is shrunk back to the rows it had, so far as the file still takes writes;
/// rows that reached its extent but not its data read as fill, which a resume drops
/// ([`crate::tail`]).
fn append_rows<T: H5Type>(
    file: &File,
    path: &Path,
    ds: &Dataset,
    rows: &[T],
) -> Result<(), RecordError> {
    if let Some(problem) = crate::headroom::short_of_room(path) {
        return Err(RecordError::NoRoom {
            path: path.to_path_buf(),
            problem,
        });
    }
    let n = ds.size();
    let written = ds
        .resize(n + rows.len())
        .and_then(|()| ds.write_slice(rows, n..n + rows.len()))
        .and_then(|()| file.flush());
    if let Err(e) = written {
        let _ = ds.resize(n).and_then(|()| file.flush());
        return Err(h5(path)(e));
    }
    Ok(())
}

/// Appends one row and flushes the file.
fn append<T: H5Type>(file: &File, path: &Path, ds: &Dataset, row: &T) -> Result<(), RecordError> {
    append_rows(file, path, ds, std::slice::from_ref(row))
}

/// One dataset's chain as it grows: its last digest and its rows so far.
struct Chain {
    name: &'static str,
    last: Cell<Digest>,
    rows: Cell<u64>,
}

impl Chain {
    /// The chain of dataset `name` after `rows` rows ending in `last`.
    fn at(name: &'static str, last: Digest, rows: u64) -> Chain {
        Chain {
            name,
            last: Cell::new(last),
            rows: Cell::new(rows),
        }
    }

    /// A chain of `name` in `file` over `rows`, already written.
    fn over<T: H5Type>(file: &str, name: &'static str, rows: &[T]) -> Chain {
        let last = digest::chain(digest::chain_seed(file, name), rows);
        Chain::at(name, last, rows.len() as u64)
    }

    /// Seals `rows` (filling their carried digests) and appends them with `write`; the
    /// chain goes on only once they are written.
    fn seal<T: Carried>(
        &self,
        rows: &[T],
        write: impl FnOnce(&[T]) -> Result<(), RecordError>,
    ) -> Result<(), RecordError> {
        let mut sealed = rows.to_vec();
        let last = digest::seal(self.last.get(), &mut sealed);
        write(&sealed)?;
        self.last.set(last);
        self.rows.set(self.rows.get() + rows.len() as u64);
        Ok(())
    }

    /// Extends the chain by `rows` (without carried digests).
    fn extend<T: H5Type>(&self, rows: &[T]) {
        self.last.set(digest::chain(self.last.get(), rows));
        self.rows.set(self.rows.get() + rows.len() as u64);
    }

    fn end(&self) -> ChainEnd {
        ChainEnd::new(self.name, self.rows.get(), &self.last.get())
    }
}

/// `primary.h5`: run attributes, trials, architectures, TPE observations.
pub struct PrimaryWriter {
    path: PathBuf,
    file: File,
    trials: Dataset,
    arch_ids: Dataset,
    arch_json: Dataset,
    tpe: Dataset,
    /// The chains of [`crate::schema::PRIMARY_DATASETS`], in that order.
    chains: [Chain; 3],
}

impl PrimaryWriter {
    /// Creates `primary.h5` in the folder this job holds, with the run's attributes.
    pub fn create(folder: &Claimed, meta: &RunMeta) -> Result<Self, RecordError> {
        let path = folder.dir().join(PRIMARY_FILE);
        let file = File::create(&path).map_err(h5(&path))?;
        write_attr(&file, &path, attr::SCHEMA_VERSION, &SCHEMA_VERSION)?;
        write_text_attr(&file, &path, attr::PROGRAM_VERSION, &meta.program_version)?;
        write_text_attr(&file, &path, attr::RULES_VERSION, RULES_VERSION)?;
        write_text_attr(&file, &path, attr::CONFIG, &meta.config_json)?;
        write_attr(&file, &path, attr::START_TIME, &meta.start_time_s)?;
        write_attr(&file, &path, attr::WORLD_SIZE, &meta.world_size)?;
        write_attr(&file, &path, attr::GROUPS, &meta.groups)?;
        write_attr(&file, &path, attr::ACCELERATORS, &meta.accelerators)?;
        let list = |v: &[String]| serde_json::to_string(v).expect("strings");
        write_text_attr(&file, &path, attr::HOSTS, &list(&meta.hosts))?;
        write_text_attr(&file, &path, attr::DEVICES, &list(&meta.devices))?;
        write_attr(&file, &path, attr::SEED, &meta.seed)?;
        write_text_attr(&file, &path, attr::DATASET, &meta.dataset)?;
        write_text_attr(&file, &path, attr::START_ARCH, &meta.start_architecture)?;
        write_text_attr(&file, &path, attr::PRECISION, &meta.precision)?;
        write_text_attr(&file, &path, attr::DATASET_IDENTITY, &meta.dataset_json)?;
        write_text_attr(&file, &path, attr::SEARCH, &meta.search_json)?;
        let platform = serde_json::to_string(&meta.platform).expect("plain data");
        write_text_attr(&file, &path, attr::PLATFORM, &platform)?;
        let ceilings = serde_json::to_string(&meta.ceilings).expect("plain data");
        write_text_attr(&file, &path, attr::CEILINGS, &ceilings)?;
        let trials = table::<TrialRow>(&file, &path, "trials")?;
        let arch_ids = table::<u64>(&file, &path, "architecture_ids")?;
        let arch_json = table::<VarLenUnicode>(&file, &path, "architectures")?;
        let tpe = table::<TpeRow>(&file, &path, "tpe")?;
        file.flush().map_err(h5(&path))?;
        let seed = |name| digest::chain_seed(PRIMARY_FILE, name);
        let chains = ["trials", "architectures", "tpe"].map(|n| Chain::at(n, seed(n), 0));
        Ok(PrimaryWriter {
            path,
            file,
            trials,
            arch_ids,
            arch_json,
            tpe,
            chains,
        })
    }

    /// Reopens `primary.h5` of a stopped or crashed run, in the folder this (resuming) job
    /// took over, to go on appending (`aiperf run --resume`): clears its end time and seal,
    /// records the resumption (`stopped_s`: its last record; `resumed_s`: now) in the
    /// `resumes` attribute, and takes up every chain where it ended.
    pub fn reopen(folder: &Claimed, stopped_s: f64, resumed_s: f64) -> Result<Self, RecordError> {
        let path = folder.dir().join(PRIMARY_FILE);
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
            attr::PRIMARY_DIGESTS,
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
        let sets = PrimarySets {
            trials: &trials,
            ids: &arch_ids,
            json: &arch_json,
            tpe: &tpe,
        };
        let chains = reopened_chains(&path, sets)?;
        file.flush().map_err(h5(&path))?;
        Ok(PrimaryWriter {
            path,
            file,
            trials,
            arch_ids,
            arch_json,
            tpe,
            chains,
        })
    }

    /// Records a finished (or stopped) trial.
    pub fn append_trial(&self, row: &TrialRow) -> Result<(), RecordError> {
        self.chains[0].seal(std::slice::from_ref(row), |sealed| {
            append_rows(&self.file, &self.path, &self.trials, sealed)
        })
    }

    /// Records a model's architecture (its IR JSON).
    pub fn append_architecture(&self, model_id: u64, json: &str) -> Result<(), RecordError> {
        let json = json.replace('\0', "");
        append(&self.file, &self.path, &self.arch_json, &text(&json))?;
        if let Err(e) = append(&self.file, &self.path, &self.arch_ids, &model_id) {
            // Both or neither: the text without its id is taken back.
            let n = self.arch_json.size();
            let _ = (self.arch_json.resize(n - 1)).and_then(|()| self.file.flush());
            return Err(e);
        }
        let c = &self.chains[1];
        c.last
            .set(digest::architecture_digest(&c.last.get(), model_id, &json));
        c.rows.set(c.rows.get() + 1);
        Ok(())
    }

    /// Records a TPE observation.
    pub fn append_tpe(&self, row: &TpeRow) -> Result<(), RecordError> {
        self.chains[2].seal(std::slice::from_ref(row), |sealed| {
            append_rows(&self.file, &self.path, &self.tpe, sealed)
        })
    }

    /// The values of every sealed attribute as this file holds them.
    fn sealed_attrs(&self) -> Result<Vec<(&'static str, Option<AttrValue>)>, RecordError> {
        let p = &self.path;
        PRIMARY_ATTRS
            .iter()
            .map(|s| {
                let Ok(a) = self.file.attr(s.name) else {
                    return Ok((s.name, None));
                };
                let v = match s.kind {
                    AttrKind::U32 => AttrValue::U32(a.read_scalar().map_err(h5(p))?),
                    AttrKind::U64 => AttrValue::U64(a.read_scalar().map_err(h5(p))?),
                    AttrKind::F64 => AttrValue::F64(a.read_scalar().map_err(h5(p))?),
                    AttrKind::Text => {
                        let t: VarLenUnicode = a.read_scalar().map_err(h5(p))?;
                        AttrValue::Text(t.as_str().to_owned())
                    }
                };
                Ok((s.name, Some(v)))
            })
            .collect()
    }

    /// Marks a clean end of the run at `end_time_s`, records the groups' and its own
    /// chains' ends and the run digest over every attribute
    /// ([`crate::digest::run_digest`]), closes the file and returns the run digest.
    pub fn finish(self, end_time_s: f64, groups: &[GroupChain]) -> Result<Digest, RecordError> {
        let p = &self.path;
        write_attr(&self.file, p, attr::END_TIME, &end_time_s)?;
        let groups_json = serde_json::to_string(groups).expect("plain data");
        write_text_attr(&self.file, p, attr::GROUP_DIGESTS, &groups_json)?;
        let own: Vec<ChainEnd> = self.chains.iter().map(Chain::end).collect();
        let own_json = serde_json::to_string(&own).expect("plain data");
        write_text_attr(&self.file, p, attr::PRIMARY_DIGESTS, &own_json)?;
        let run = digest::run_digest(&self.sealed_attrs()?);
        write_text_attr(&self.file, p, attr::RUN_DIGEST, &digest::hex(&run))?;
        self.file.flush().map_err(h5(p))?;
        Ok(run)
    }
}

/// Reads dataset `ds`'s rows, dropping (from the file too) those at its end that were
/// never written whole ([`crate::tail`]), said so.
fn written_rows<T: H5Type + Unwritten>(
    path: &Path,
    file: &str,
    name: &str,
    ds: &Dataset,
) -> Result<Vec<T>, RecordError> {
    let mut rows: Vec<T> = ds.read_raw().map_err(h5(path))?;
    let dropped = tail::drop_unwritten(&mut rows);
    if dropped > 0 {
        ds.resize(rows.len()).map_err(h5(path))?;
        log::warn!("{}", tail::note(file, name, dropped));
    }
    Ok(rows)
}

/// The primary file's sealed datasets: trials, architecture ids and their JSON, TPE rows.
struct PrimarySets<'a> {
    trials: &'a Dataset,
    ids: &'a Dataset,
    json: &'a Dataset,
    tpe: &'a Dataset,
}

/// The primary's chains over the rows a stopped run wrote whole (the rest dropped).
fn reopened_chains(path: &Path, sets: PrimarySets<'_>) -> Result<[Chain; 3], RecordError> {
    let PrimarySets {
        trials,
        ids,
        json,
        tpe,
    } = sets;
    let trials: Vec<TrialRow> = written_rows(path, PRIMARY_FILE, "trials", trials)?;
    let tpe: Vec<TpeRow> = written_rows(path, PRIMARY_FILE, "tpe", tpe)?;
    let id_rows: Vec<u64> = ids.read_raw().map_err(h5(path))?;
    let json_rows: Vec<String> = (json.read_raw::<VarLenUnicode>().map_err(h5(path))?)
        .iter()
        .map(|j| j.as_str().to_owned())
        .collect();
    let whole = tail::architectures_written(&id_rows, &json_rows);
    let dropped = id_rows.len().max(json_rows.len()) - whole;
    if dropped > 0 {
        ids.resize(whole).map_err(h5(path))?;
        json.resize(whole).map_err(h5(path))?;
        log::warn!("{}", tail::note(PRIMARY_FILE, "architectures", dropped));
    }
    let archs: Vec<(u64, String)> = id_rows.into_iter().zip(json_rows).take(whole).collect();
    let seed = |name| digest::chain_seed(PRIMARY_FILE, name);
    let arch_last = digest::architecture_chain(seed("architectures"), &archs);
    Ok([
        Chain::at(
            "trials",
            digest::last_carried(seed("trials"), &trials),
            trials.len() as u64,
        ),
        Chain::at("architectures", arch_last, archs.len() as u64),
        Chain::at(
            "tpe",
            digest::last_carried(seed("tpe"), &tpe),
            tpe.len() as u64,
        ),
    ])
}

/// `group-<g>.h5`: a group's epochs, monitor samples, traced spans and trials' early steps,
/// each dataset chained as it grows (epoch and step rows carry their digest).
pub struct GroupWriter {
    path: PathBuf,
    file: File,
    epochs: Dataset,
    monitor: Dataset,
    trace: Dataset,
    steps: Dataset,
    group: u32,
    ranks: u32,
    /// The chains of [`crate::schema::GROUP_DATASETS`], in that order.
    chains: [Chain; 4],
}

impl GroupWriter {
    /// Creates `group-<g>.h5` in the folder this job holds.
    pub fn create(folder: &Claimed, group: u32, accelerators: u32) -> Result<Self, RecordError> {
        let path = folder.dir().join(group_file(group));
        let file = File::create(&path).map_err(h5(&path))?;
        write_attr(&file, &path, attr::SCHEMA_VERSION, &SCHEMA_VERSION)?;
        write_attr(&file, &path, "group", &group)?;
        write_attr(&file, &path, attr::ACCELERATORS, &accelerators)?;
        let epochs = table::<EpochRow>(&file, &path, "epochs")?;
        let monitor = table::<MonitorRow>(&file, &path, "monitor")?;
        let trace = table::<TraceRow>(&file, &path, "trace")?;
        let steps = table::<StepRow>(&file, &path, "steps")?;
        file.flush().map_err(h5(&path))?;
        let name = group_file(group);
        let chains = ["epochs", "monitor", "trace", "steps"]
            .map(|n| Chain::at(n, digest::chain_seed(&name, n), 0));
        Ok(GroupWriter {
            path,
            file,
            epochs,
            monitor,
            trace,
            steps,
            group,
            ranks: accelerators,
            chains,
        })
    }

    /// Opens `group-<g>.h5` in the folder this job holds to go on appending (a resumed run),
    /// or creates it.
    pub fn open_or_create(
        folder: &Claimed,
        group: u32,
        accelerators: u32,
    ) -> Result<Self, RecordError> {
        let path = folder.dir().join(group_file(group));
        if !path.is_file() {
            return GroupWriter::create(folder, group, accelerators);
        }
        let file = File::open_rw(&path).map_err(h5(&path))?;
        let epochs = file.dataset("epochs").map_err(h5(&path))?;
        let monitor = file.dataset("monitor").map_err(h5(&path))?;
        let trace = file.dataset("trace").map_err(h5(&path))?;
        let steps = file.dataset("steps").map_err(h5(&path))?;
        // Every chain goes on from the last row written before the stop.
        let name = group_file(group);
        let carried = |d: &'static str, rows_len: u64, last: Digest| Chain::at(d, last, rows_len);
        let rows: Vec<EpochRow> = written_rows(&path, &name, "epochs", &epochs)?;
        let epochs_chain = carried(
            "epochs",
            rows.len() as u64,
            digest::last_carried(digest::chain_seed(&name, "epochs"), &rows),
        );
        let step_rows: Vec<StepRow> = written_rows(&path, &name, "steps", &steps)?;
        let steps_chain = carried(
            "steps",
            step_rows.len() as u64,
            digest::last_carried(digest::chain_seed(&name, "steps"), &step_rows),
        );
        let monitor_rows: Vec<MonitorRow> = written_rows(&path, &name, "monitor", &monitor)?;
        let trace_rows: Vec<TraceRow> = written_rows(&path, &name, "trace", &trace)?;
        let chains = [
            epochs_chain,
            Chain::over(&name, "monitor", &monitor_rows),
            Chain::over(&name, "trace", &trace_rows),
            steps_chain,
        ];
        Ok(GroupWriter {
            path,
            file,
            epochs,
            monitor,
            trace,
            steps,
            group,
            ranks: accelerators,
            chains,
        })
    }

    /// Records a completed epoch (its `digest` is filled in here).
    pub fn append_epoch(&self, row: &EpochRow) -> Result<(), RecordError> {
        self.append_epochs(std::slice::from_ref(row))
    }

    /// Records several completed epochs at once (one flush), e.g. when replaying records.
    pub fn append_epochs(&self, rows: &[EpochRow]) -> Result<(), RecordError> {
        self.chains[0].seal(rows, |sealed| {
            append_rows(&self.file, &self.path, &self.epochs, sealed)
        })
    }

    /// Records a trial's early steps ([`crate::schema::EARLY_STEPS`] at most, in step
    /// order; their digests are filled in here), before the trial's first epoch row.
    pub fn append_steps(&self, rows: &[StepRow]) -> Result<(), RecordError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.chains[3].seal(rows, |sealed| {
            append_rows(&self.file, &self.path, &self.steps, sealed)
        })
    }

    /// The file's chains so far, as the primary records them at a clean stop.
    pub fn chain(&self) -> GroupChain {
        GroupChain {
            group: self.group,
            ranks: self.ranks,
            chains: self.chains.iter().map(Chain::end).collect(),
        }
    }

    /// Records traced spans (`--trace-steps`).
    pub fn append_trace(&self, rows: &[TraceRow]) -> Result<(), RecordError> {
        if rows.is_empty() {
            return Ok(());
        }
        append_rows(&self.file, &self.path, &self.trace, rows)?;
        self.chains[2].extend(rows);
        Ok(())
    }

    /// Records a monitor sample.
    pub fn append_monitor(&self, row: &MonitorRow) -> Result<(), RecordError> {
        append(&self.file, &self.path, &self.monitor, row)?;
        self.chains[1].extend(std::slice::from_ref(row));
        Ok(())
    }
}
