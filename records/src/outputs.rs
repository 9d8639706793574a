//! What `aiperf score` writes (`--csv`, `--trace`, `--report`), kept away from what it reads.
//!
//! - [`Records`]: before anything is read or written, every output path is checked against
//!   the records of the runs being scored and refused ([`Refused`]) when it is one of them
//!   (the same path once symbolic links are resolved, or the same device and inode: a hard
//!   link), or when it would put a file under a record's name in a run folder (every `*.h5`
//!   file there: `primary.h5`, `group-<g>.h5`, `audit.h5`), existing or not.
//! - [`write_atomic`] and [`Staged`]: every output is written to a temporary file in the
//!   target's folder and renamed over the target only once complete, so that a failure part
//!   way leaves no half file under the target's name and touches nothing else (the rename
//!   replaces the target's directory entry: other hard links to the old file keep it).
//!   [`Staged::commit_new`] publishes without ever replacing an existing file (`audit.h5`).

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many symbolic links are followed at the end of a path before giving up (Linux's
/// limit).
const MAX_LINKS: usize = 40;

/// Device and inode: the identity of a file whatever its path.
type FileId = (u64, u64);

/// The option that names an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    /// `--csv FILE`.
    Csv,
    /// `--trace FILE`.
    Trace,
    /// `--report DIR`: the folder and every file the report writes into it.
    Report,
}

impl Flag {
    /// The option as typed.
    pub fn name(self) -> &'static str {
        match self {
            Flag::Csv => "--csv",
            Flag::Trace => "--trace",
            Flag::Report => "--report",
        }
    }

    /// What the option names: `file` or `folder`.
    pub fn kind(self) -> &'static str {
        match self {
            Flag::Csv | Flag::Trace => "file",
            Flag::Report => "folder",
        }
    }
}

/// An output refused because writing it would destroy a record or pose as one.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The output is an existing record (by its path, or by device and inode).
    #[error("{} {}: refused: {subject} is {}{via}, a record of the run in {}: writing it would destroy the record; nothing was written, give another {}", flag.name(), given.display(), record.display(), run.display(), flag.kind())]
    IsRecord {
        /// The option.
        flag: Flag,
        /// Its value, as given.
        given: PathBuf,
        /// `the file`, `the folder`, or the report's file concerned.
        subject: String,
        /// The record, in the run folder as given.
        record: PathBuf,
        /// How the output reaches the record: empty, or a symbolic or hard link.
        via: &'static str,
        /// The run folder, as given.
        run: PathBuf,
    },
    /// The output would be a new `*.h5` file in a run folder.
    #[error("{} {}: refused: {subject} would be {}, a record's name in the run folder {} (every *.h5 file in a run folder is a record: primary.h5, group-<g>.h5, audit.h5): writing it would pose as a record; nothing was written, give another {}", flag.name(), given.display(), path.display(), run.display(), flag.kind())]
    RecordName {
        /// The option.
        flag: Flag,
        /// Its value, as given.
        given: PathBuf,
        /// `the file`, `the folder`, or the report's file concerned.
        subject: String,
        /// The path it would have, in the run folder as given.
        path: PathBuf,
        /// The run folder, as given.
        run: PathBuf,
    },
}

/// One record file of a run being scored.
#[derive(Clone, Debug)]
struct Record {
    /// The run folder as given.
    run: PathBuf,
    /// The record as the user names it (the run folder as given, joined with its name).
    shown: PathBuf,
    /// Its canonical path.
    canonical: PathBuf,
    /// Its device and inode, when it can be read.
    id: Option<FileId>,
}

/// The records of the runs being scored, which no output may name.
#[derive(Clone, Debug, Default)]
pub struct Records {
    /// Every run folder that exists: as given, canonical.
    runs: Vec<(PathBuf, PathBuf)>,
    /// Every `*.h5` file in them.
    files: Vec<Record>,
}

/// Whether `name` is a record's name: `*.h5` (any case).
pub fn is_record_name(name: &OsStr) -> bool {
    Path::new(name)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("h5"))
}

/// The device and inode of the file at `path` (through symbolic links).
fn file_id(path: &Path) -> Option<FileId> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// `path` with the symbolic links at its end followed (as writing through it would).
fn final_target(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::read_link(&p) {
            Ok(t) => p = p.parent().unwrap_or(Path::new("")).join(t),
            Err(_) => break,
        }
    }
    p
}

/// Where writing `path` would land: its canonical path, or, for a path not there yet, its
/// deepest existing folder's canonical path with the rest appended.
pub fn resolve(path: &Path) -> PathBuf {
    let path = final_target(path);
    if let Ok(c) = fs::canonicalize(&path) {
        return c;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if parent.as_os_str().is_empty() => {
            resolve(Path::new(".")).join(name)
        }
        (Some(parent), Some(name)) => resolve(parent).join(name),
        _ => std::path::absolute(&path).unwrap_or(path),
    }
}

impl Records {
    /// The records in `runs` (run folders, as given): every `*.h5` file there. A folder that
    /// cannot be read is skipped (reading the run reports it).
    pub fn of(runs: &[PathBuf]) -> Records {
        let mut records = Records::default();
        for run in runs {
            let Ok(canonical) = fs::canonicalize(run) else {
                continue;
            };
            let Ok(entries) = fs::read_dir(&canonical) else {
                continue;
            };
            for name in entries.flatten().map(|e| e.file_name()) {
                if !is_record_name(&name) {
                    continue;
                }
                let path = canonical.join(&name);
                records.files.push(Record {
                    run: run.clone(),
                    shown: run.join(&name),
                    canonical: fs::canonicalize(&path).unwrap_or_else(|_| path.clone()),
                    id: file_id(&path),
                });
            }
            records.runs.push((run.clone(), canonical));
        }
        records
    }

    /// Refuses `file`, which `flag` (given as `given`) would write, when it is a record of
    /// these runs or a record's name in one of their folders.
    pub fn check(&self, flag: Flag, given: &Path, file: &Path) -> Result<(), Refused> {
        let subject = if file == given {
            format!("the {}", flag.kind())
        } else {
            file.display().to_string()
        };
        let target = resolve(file);
        let id = file_id(file);
        for r in &self.files {
            let same_path = r.canonical == target;
            if same_path || (id.is_some() && id == r.id) {
                let link = fs::symlink_metadata(file).is_ok_and(|m| m.file_type().is_symlink());
                let via = match (same_path, link) {
                    (false, _) => " (a hard link to it)",
                    (true, true) => " (through a symbolic link)",
                    (true, false) => "",
                };
                return Err(Refused::IsRecord {
                    flag,
                    given: given.into(),
                    subject,
                    record: r.shown.clone(),
                    via,
                    run: r.run.clone(),
                });
            }
        }
        let (Some(parent), Some(name)) = (target.parent(), target.file_name()) else {
            return Ok(());
        };
        match self.runs.iter().find(|(_, c)| c == parent) {
            Some((run, _)) if is_record_name(name) => Err(Refused::RecordName {
                flag,
                given: given.into(),
                subject,
                path: run.join(name),
                run: run.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// A temporary file beside its target, renamed over it by [`Staged::commit`] (or
/// [`Staged::commit_new`]) and removed if dropped uncommitted.
#[derive(Debug)]
pub struct Staged {
    /// The temporary file.
    tmp: PathBuf,
    /// Where it goes.
    target: PathBuf,
    /// Committed (nothing to remove).
    done: bool,
}

impl Staged {
    /// Reserves (creates empty) a temporary file in `target`'s folder, hidden and keeping
    /// `target`'s extension (`.ops.tmp-<pid>-<n>.png`: encoders choose the format by it).
    /// `target` is followed through symbolic links at its end, as writing it would.
    pub fn new(target: &Path) -> io::Result<(Staged, fs::File)> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let target = final_target(target);
        let name = target
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
        let folder = target.parent().unwrap_or(Path::new(""));
        let stem = Path::new(name)
            .file_stem()
            .unwrap_or(name)
            .to_string_lossy();
        let ext = Path::new(name)
            .extension()
            .map_or(String::new(), |e| format!(".{}", e.to_string_lossy()));
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let tmp = folder.join(format!(".{stem}.tmp-{}-{n}{ext}", std::process::id()));
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
            {
                Ok(file) => {
                    let staged = Staged {
                        tmp,
                        target,
                        done: false,
                    };
                    return Ok((staged, file));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The temporary file, to write.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// The target.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Flushes the temporary file to disk, giving it the target's permissions when the
    /// target exists.
    fn settle(&self) -> io::Result<()> {
        if let Ok(m) = fs::metadata(&self.target) {
            fs::set_permissions(&self.tmp, m.permissions())?;
        }
        fs::File::open(&self.tmp)?.sync_all()
    }

    /// Syncs the folder, so that the rename survives a crash (best effort).
    fn sync_folder(&self) {
        let folder = self.target.parent().filter(|p| !p.as_os_str().is_empty());
        if let Ok(f) = fs::File::open(folder.unwrap_or(Path::new("."))) {
            let _ = f.sync_all();
        }
    }

    /// Renames the complete temporary file over the target (replacing it, if any).
    pub fn commit(mut self) -> io::Result<()> {
        self.settle()?;
        fs::rename(&self.tmp, &self.target)?;
        self.done = true;
        self.sync_folder();
        Ok(())
    }

    /// Publishes the complete temporary file under the target's name only if nothing is
    /// there (a hard link cannot replace: `AlreadyExists` then, and the target is left as it
    /// was). Where the file system has no hard links, an existence check and a rename.
    pub fn commit_new(mut self) -> io::Result<()> {
        self.settle()?;
        match fs::hard_link(&self.tmp, &self.target) {
            Ok(()) => {
                let _ = fs::remove_file(&self.tmp); // published; a leftover name is harmless
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(e),
            Err(_) if self.target.exists() => return Err(io::ErrorKind::AlreadyExists.into()),
            Err(_) => fs::rename(&self.tmp, &self.target)?,
        }
        self.done = true;
        self.sync_folder();
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `path` through a temporary file renamed over it when complete.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (staged, mut file) = Staged::new(path)?;
    file.write_all(bytes)?;
    drop(file);
    staged.commit()
}
