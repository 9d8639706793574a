//! Replacing a dataset's packs all or nothing. The new splits are staged as temporary files
//! beside the old ones ([`StagedPack`]); [`commit_all`] then
//!
//! 1. checks that every staged file is complete (it opens as a pack, with the header that
//!    was written and the length that header implies);
//! 2. checks that every target can be replaced: absent, or a writable regular file (or a
//!    symbolic link), with no backup left by an interrupted conversion beside it — a folder,
//!    a read-only file or anything else is refused before anything is renamed;
//! 3. renames every existing target to `<file>.bak-<pid>`, then every staged file into
//!    place; if any rename fails, the renames done so far are undone in reverse order, so the
//!    earlier files are back under their names, byte for byte;
//! 4. removes the backups.
//!
//! Until step 3 the earlier dataset is never touched. A process killed during step 3 (a few
//! renames) leaves the earlier files as `<file>.bak-<pid>`; the next conversion into that
//! folder refuses to start until they are renamed back or deleted ([`check_targets`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{Header, Pack};
use crate::error::{PrepError, Result};

/// Checks that each of `targets` can be replaced by a new pack: it is absent, a regular file
/// that is not read-only, or a symbolic link; and no backup left by an interrupted conversion
/// (`<file>.bak-<pid>`) lies beside it. Converters call it before any work, and
/// [`commit_all`] again before renaming anything, so a blocked output folder costs neither
/// the conversion's time nor the earlier dataset.
pub fn check_targets<P: AsRef<Path>>(targets: &[P]) -> Result<()> {
    for target in targets {
        check_target(target.as_ref())?;
    }
    let names: Vec<String> = targets
        .iter()
        .filter_map(|t| t.as_ref().file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    for target in targets {
        check_no_stale_backup(target.as_ref(), &names.join(", "))?;
    }
    Ok(())
}

/// One target: absent, a writable regular file, or a symbolic link.
fn check_target(target: &Path) -> Result<()> {
    let meta = match fs::symlink_metadata(target) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(PrepError::io(target, e)),
    };
    let kind = meta.file_type();
    let refuse = |what: &str, fix: String| {
        PrepError::format(
            target,
            format!("{what}, so the new pack cannot replace it; {fix}, then run again (nothing in the output folder was changed)"),
        )
    };
    if kind.is_dir() {
        return Err(refuse(
            "a folder",
            "move or remove the folder (a pack is a file)".into(),
        ));
    }
    if kind.is_symlink() {
        return Ok(());
    }
    if !kind.is_file() {
        return Err(refuse("not a regular file", "move or remove it".into()));
    }
    if meta.permissions().readonly() {
        return Err(refuse(
            "read-only",
            format!(
                "make it writable (chmod u+w {}) or remove it",
                target.display()
            ),
        ));
    }
    Ok(())
}

/// The backup name of `target` for this process: `<file>.bak-<pid>`.
fn backup_path(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".bak-{}", std::process::id()));
    target.with_file_name(name)
}

/// Refuses a `<file>.bak-*` beside `target`: part of the earlier dataset of an interrupted
/// conversion, which a new one must not bury. `names` lists the dataset's file names.
fn check_no_stale_backup(target: &Path, names: &str) -> Result<()> {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(name) = target.file_name().and_then(|n| n.to_str()) else {
        return Ok(());
    };
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(PrepError::io(dir, e)),
    };
    let prefix = format!("{name}.bak-");
    for entry in entries {
        let entry = entry.map_err(|e| PrepError::io(dir, e))?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            return Err(PrepError::format(
                entry.path(),
                format!(
                    "a backup of the earlier {name}, left by an interrupted conversion; if any of {names} is missing from {}, restore the earlier dataset by renaming every *.bak-<pid> file there back to its name (this one to {name}); otherwise the new dataset is complete: delete the backups; then run again",
                    dir.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Checks that a staged file is complete: it opens as a pack, holds the header that was
/// written, and is exactly as long as that header implies.
fn check_staged(pack: &StagedPack) -> Result<()> {
    let tmp = pack.tmp_path().expect("staged pack not yet committed");
    let incomplete = |why: String| {
        PrepError::format(
            tmp,
            format!("the new pack is incomplete ({why}); the earlier dataset was left as it was: check the free disk space and run again"),
        )
    };
    let opened = Pack::open(tmp).map_err(|e| incomplete(e.to_string()))?;
    if opened.header() != pack.header() {
        return Err(incomplete("its header differs from the one written".into()));
    }
    let len = fs::metadata(tmp)
        .map_err(|e| incomplete(e.to_string()))?
        .len();
    if len != pack.file_len() {
        return Err(incomplete(format!(
            "{len} bytes, {} were written",
            pack.file_len()
        )));
    }
    Ok(())
}

/// One rename done while replacing, with how to undo it.
enum Step {
    /// An earlier target moved to its backup name.
    BackedUp { target: PathBuf, backup: PathBuf },
    /// A staged file moved to its target name.
    MovedIn { tmp: PathBuf, target: PathBuf },
}

/// Renames the existing targets to backups, then the staged files into place. On a failed
/// rename, undoes the steps done so far in reverse order and says whether that worked.
fn replace(pairs: &[(PathBuf, PathBuf)]) -> Result<Vec<PathBuf>> {
    let mut done: Vec<Step> = Vec::new();
    let mut failed = None;
    for (_, target) in pairs {
        if fs::symlink_metadata(target).is_ok() {
            let backup = backup_path(target);
            if let Err(e) = fs::rename(target, &backup) {
                failed = Some((target.clone(), e));
                break;
            }
            done.push(Step::BackedUp {
                target: target.clone(),
                backup,
            });
        }
    }
    if failed.is_none() {
        for (tmp, target) in pairs {
            if let Err(e) = fs::rename(tmp, target) {
                failed = Some((target.clone(), e));
                break;
            }
            done.push(Step::MovedIn {
                tmp: tmp.clone(),
                target: target.clone(),
            });
        }
    }
    let Some((target, error)) = failed else {
        return Ok(done
            .into_iter()
            .filter_map(|s| match s {
                Step::BackedUp { backup, .. } => Some(backup),
                Step::MovedIn { .. } => None,
            })
            .collect());
    };
    let restored = match roll_back(done) {
        Ok(()) => "the earlier dataset was restored as it was".to_string(),
        Err(e) => format!("restoring the earlier dataset failed: {e}"),
    };
    Err(PrepError::format(
        &target,
        format!("cannot replace it with the new pack ({error}); {restored}; fix the cause and run again"),
    ))
}

/// Undoes `done` in reverse order; names every backup that could not be put back.
fn roll_back(done: Vec<Step>) -> std::result::Result<(), String> {
    let mut lost = Vec::new();
    for step in done.into_iter().rev() {
        match step {
            Step::MovedIn { tmp, target } => {
                // Back under the temporary name, which the staged pack removes; should that
                // fail, the backup's rename below still replaces it.
                let _ = fs::rename(&target, &tmp);
            }
            Step::BackedUp { target, backup } => {
                if let Err(e) = fs::rename(&backup, &target) {
                    lost.push(format!(
                        "{} is kept as {} ({e}): rename it back by hand",
                        target.display(),
                        backup.display()
                    ));
                }
            }
        }
    }
    if lost.is_empty() {
        Ok(())
    } else {
        Err(lost.join("; "))
    }
}

/// Replaces the targets of `staged` with the staged files, all or nothing (see the module
/// documentation); returns their headers in order. On any failure every earlier target is
/// as it was and the staged files are removed.
pub fn commit_all(mut staged: Vec<StagedPack>) -> Result<Vec<Header>> {
    for pack in &staged {
        check_staged(pack)?;
    }
    let targets: Vec<&Path> = staged.iter().map(|p| p.path()).collect();
    check_targets(&targets)?;
    let pairs: Vec<(PathBuf, PathBuf)> = staged
        .iter()
        .map(|p| {
            let tmp = p.tmp_path().expect("staged pack not yet committed");
            (tmp.to_path_buf(), p.path().to_path_buf())
        })
        .collect();
    let backups = replace(&pairs)?;
    let headers = staged.iter_mut().map(StagedPack::mark_committed).collect();
    for backup in backups {
        if let Err(e) = fs::remove_file(&backup) {
            log::warn!(
                "{}: cannot remove the earlier pack's backup ({e}); delete it",
                backup.display()
            );
        }
    }
    sync_dirs(&pairs);
    Ok(headers)
}

/// Syncs the folders holding the targets, so the renames survive a crash (best effort).
fn sync_dirs(pairs: &[(PathBuf, PathBuf)]) {
    let mut dirs: Vec<&Path> = pairs.iter().filter_map(|(_, t)| t.parent()).collect();
    dirs.dedup();
    for dir in dirs {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// A split whose file is complete and synced under its temporary name, not yet renamed into
/// place. Dropped uncommitted, it removes the temporary file.
#[must_use = "a staged pack is removed unless committed"]
#[derive(Debug)]
pub struct StagedPack {
    path: PathBuf,
    tmp_path: Option<PathBuf>,
    file_len: u64,
    header: Header,
}

impl StagedPack {
    /// The pack complete and synced at `tmp_path`, `file_len` bytes, bound for `path`.
    pub(super) fn new(path: PathBuf, tmp_path: PathBuf, file_len: u64, header: Header) -> Self {
        StagedPack {
            path,
            tmp_path: Some(tmp_path),
            file_len,
            header,
        }
    }

    /// The header written into the file.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Where the file goes when committed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Puts the file into place as [`commit_all`] does (checked complete, the target checked
    /// replaceable, the earlier file restored on failure); returns its header.
    pub fn commit(self) -> Result<Header> {
        let mut headers = commit_all(vec![self])?;
        Ok(headers.remove(0))
    }

    /// The temporary file, until committed.
    fn tmp_path(&self) -> Option<&Path> {
        self.tmp_path.as_deref()
    }

    /// Bytes the complete file has.
    fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Records that the file was renamed into place (so dropping it removes nothing);
    /// returns its header.
    fn mark_committed(&mut self) -> Header {
        self.tmp_path = None;
        self.header.clone()
    }
}

impl Drop for StagedPack {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp_path.take() {
            let _ = fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::{PackWriter, Source};

    /// A staged pack of one 1×1×2 image whose pixels are `pixel`.
    fn stage(path: &Path, pixel: u8) -> StagedPack {
        let mut w = PackWriter::create(path, "train", [1, 1, 2], 1).unwrap();
        w.push(&[pixel, pixel], 0, Path::new("src")).unwrap();
        let source = Source {
            kind: "test".into(),
            dataset: "test".into(),
            inputs: vec![],
            processing: String::new(),
            subset: Some(false),
        };
        w.finish_staged(vec!["a".into()], source, 0).unwrap()
    }

    /// The names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    /// An earlier dataset in `dir`: train.aipk and val.aipk with pixels 1 and 2.
    fn earlier(dir: &Path) -> (Vec<u8>, Vec<u8>) {
        let (train, val) = (dir.join("train.aipk"), dir.join("val.aipk"));
        commit_all(vec![stage(&train, 1), stage(&val, 2)]).unwrap();
        (fs::read(train).unwrap(), fs::read(val).unwrap())
    }

    #[test]
    fn commit_all_replaces_both_and_leaves_no_backup() {
        let dir = tempfile::tempdir().unwrap();
        let (old_train, _) = earlier(dir.path());
        let (train, val) = (dir.path().join("train.aipk"), dir.path().join("val.aipk"));
        commit_all(vec![stage(&train, 3), stage(&val, 4)]).unwrap();
        assert_ne!(fs::read(&train).unwrap(), old_train);
        assert_eq!(Pack::open(&val).unwrap().image(0), &[4, 4]);
        assert_eq!(names(dir.path()), ["train.aipk", "val.aipk"]);
    }

    #[test]
    fn commit_all_refuses_a_folder_target_before_renaming_anything() {
        let dir = tempfile::tempdir().unwrap();
        let (old_train, _) = earlier(dir.path());
        let (train, val) = (dir.path().join("train.aipk"), dir.path().join("val.aipk"));
        let staged = vec![stage(&train, 3), stage(&val, 4)];
        // The folder appears while the new splits are being written.
        fs::remove_file(&val).unwrap();
        fs::create_dir_all(val.join("inside")).unwrap();
        let err = commit_all(staged).unwrap_err().to_string();
        assert!(
            err.contains("val.aipk") && err.contains("a folder"),
            "{err}"
        );
        assert_eq!(fs::read(&train).unwrap(), old_train);
        assert_eq!(names(dir.path()), ["train.aipk", "val.aipk"]);
        assert!(val.join("inside").is_dir());
    }

    #[test]
    fn a_failed_rename_restores_every_earlier_file() {
        let dir = tempfile::tempdir().unwrap();
        let (old_train, old_val) = earlier(dir.path());
        let (train, val) = (dir.path().join("train.aipk"), dir.path().join("val.aipk"));
        let new_train = dir.path().join("train.aipk.new");
        fs::write(&new_train, b"new").unwrap();
        // The second staged file is missing: its rename fails after both earlier files
        // were backed up and the first new one was renamed in.
        let pairs = [
            (new_train.clone(), train.clone()),
            (dir.path().join("gone"), val.clone()),
        ];
        let err = replace(&pairs).unwrap_err().to_string();
        assert!(
            err.contains("val.aipk") && err.contains("restored as it was"),
            "{err}"
        );
        assert_eq!(fs::read(&train).unwrap(), old_train);
        assert_eq!(fs::read(&val).unwrap(), old_val);
        assert_eq!(fs::read(&new_train).unwrap(), b"new", "back under its name");
        assert_eq!(
            names(dir.path()),
            ["train.aipk", "train.aipk.new", "val.aipk"]
        );
    }

    #[test]
    fn a_backup_left_by_an_interrupted_conversion_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let backup = dir.path().join("val.aipk.bak-12345");
        fs::write(&backup, b"the only copy").unwrap();
        let targets = [dir.path().join("train.aipk"), dir.path().join("val.aipk")];
        let err = check_targets(&targets).unwrap_err().to_string();
        assert!(
            err.contains("val.aipk.bak-12345") && err.contains("(this one to val.aipk)"),
            "{err}"
        );
        assert_eq!(fs::read(&backup).unwrap(), b"the only copy");
    }

    #[test]
    fn a_truncated_staged_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (old_train, _) = earlier(dir.path());
        let train = dir.path().join("train.aipk");
        let staged = stage(&train, 3);
        let tmp = staged.tmp_path().unwrap().to_path_buf();
        let len = fs::metadata(&tmp).unwrap().len();
        fs::OpenOptions::new()
            .write(true)
            .open(&tmp)
            .unwrap()
            .set_len(len - 1)
            .unwrap();
        let err = commit_all(vec![staged]).unwrap_err().to_string();
        assert!(err.contains("incomplete"), "{err}");
        assert_eq!(fs::read(&train).unwrap(), old_train);
        assert_eq!(names(dir.path()), ["train.aipk", "val.aipk"]);
    }
}
