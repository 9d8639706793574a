//! A results folder belongs to one job. Rank 0 refuses a `--results` folder that holds any
//! aiperf record (a run's, an audit's, or another job's claim), then claims it atomically by
//! an exclusive create of [`CLAIM_FILE`] holding this job's identity; every writer checks the
//! claim is still this job's just before its first record. This is independent of HDF5's
//! file locking, which cluster filesystems often turn off: two jobs started together with
//! the same folder cannot both write there.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::bail;

/// The claim's file name inside the results folder.
pub const CLAIM_FILE: &str = ".aiperf-claim";

/// This job's identity, written into the claim: host, process, the batch system's job id
/// where there is one, the run's start and a nonce, so two jobs never write the same text.
pub fn identity(t0_s: f64) -> String {
    let job = [
        "SLURM_JOB_ID",
        "PBS_JOBID",
        "LSB_JOBID",
        "JOB_ID",
        "FLUX_JOB_ID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok().map(|id| format!("{v}={id}")))
    .unwrap_or_else(|| "no batch job".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "aiperf run on {} pid {} ({job}), run start {t0_s:.3}, nonce {nanos:09}",
        super::bootstrap::host_name(),
        std::process::id()
    )
}

fn claim_path(dir: &Path) -> PathBuf {
    dir.join(CLAIM_FILE)
}

/// The aiperf records in `dir` (sorted): a run's, an audit's, or a claim.
fn records_in(dir: &Path) -> anyhow::Result<Vec<String>> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        anyhow::anyhow!(
            "--results {}: {e} (give a folder aiperf may read and write)",
            dir.display()
        )
    })?;
    let mut records: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            n == aiperf_records::schema::PRIMARY_FILE
                || n == aiperf_records::audit::AUDIT_FILE
                || n == CLAIM_FILE
                || (n.starts_with("group-") && n.ends_with(".h5"))
        })
        .collect();
    records.sort();
    Ok(records)
}

/// Rank 0, for a fresh run, before anything else is checked: `dir` must hold no aiperf
/// record (aiperf never replaces one) nor another job's claim, or be creatable.
pub fn check_fresh(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        let records = records_in(dir)?;
        if records.iter().any(|r| r == CLAIM_FILE) {
            return Err(claimed_by_another(dir));
        }
        if let Some(first) = records.first() {
            bail!(
                "--results {}: holds the records of a run ({first}{}): aiperf never overwrites them; continue that run with `aiperf run --resume {}`, or give a new folder",
                dir.display(),
                if records.len() > 1 { ", …" } else { "" },
                dir.display()
            );
        }
        Ok(())
    } else {
        creatable(dir)
    }
}

/// Rank 0, for a fresh run once every check has passed, just before the roles start: `dir`
/// (checked again, as another job may have started meanwhile) is created if need be and
/// claimed for this job (`identity`) by an exclusive create.
pub fn claim_fresh(dir: &Path, identity: &str) -> anyhow::Result<()> {
    check_fresh(dir)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("--results {}: cannot be created: {e}", dir.display()))?;
    if create_claim(dir, identity)? {
        Ok(())
    } else {
        Err(claimed_by_another(dir))
    }
}

/// `identity` written beside the claim, complete and synced, under a name of this process.
fn written_aside(dir: &Path, identity: &str) -> std::io::Result<PathBuf> {
    let tmp = dir.join(format!("{CLAIM_FILE}.{}.tmp", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(identity.as_bytes())?;
    f.sync_all()?;
    Ok(tmp)
}

/// Creates the claim holding `identity`, complete or not at all (written aside, then hard-
/// linked into place, which fails where a claim exists, so no reader sees it half written).
/// False when a claim was there already.
fn create_claim(dir: &Path, identity: &str) -> anyhow::Result<bool> {
    let refuse = |e: std::io::Error| {
        anyhow::anyhow!("--results {}: cannot claim the folder: {e}", dir.display())
    };
    let tmp = written_aside(dir, identity).map_err(refuse)?;
    let linked = std::fs::hard_link(&tmp, claim_path(dir));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(refuse(e)),
    }
}

/// Rank 0, resuming: the run's folder is this job's now (the claim replaced atomically).
pub fn reclaim(dir: &Path, identity: &str) -> anyhow::Result<()> {
    written_aside(dir, identity)
        .and_then(|tmp| std::fs::rename(&tmp, claim_path(dir)))
        .map_err(|e| anyhow::anyhow!("--resume {}: cannot claim the folder: {e}", dir.display()))
}

/// Before a writer's first record: the claim in `dir` must still be this job's. A folder on
/// another node's own disk (no shared filesystem) holds no claim yet: it is claimed there.
pub fn confirm(dir: &Path, identity: &str) -> anyhow::Result<()> {
    match std::fs::read_to_string(claim_path(dir)) {
        Ok(text) if text == identity => Ok(()),
        Ok(_) => Err(claimed_by_another(dir)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Claimed in between, by this job's other writer on the node or by another job:
            // then the claim there decides.
            let ours = create_claim(dir, identity)?
                || std::fs::read_to_string(claim_path(dir)).is_ok_and(|t| t == identity);
            if ours {
                Ok(())
            } else {
                Err(claimed_by_another(dir))
            }
        }
        Err(e) => bail!("--results {}: cannot read its claim: {e}", dir.display()),
    }
}

/// The refusal when another job holds the folder, naming that job as its claim says.
fn claimed_by_another(dir: &Path) -> anyhow::Error {
    let holder = std::fs::read_to_string(claim_path(dir))
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    anyhow::anyhow!(
        "--results {}: claimed by another job ({holder}): give each job its own --results folder (if that job is gone and left no record, remove {})",
        dir.display(),
        claim_path(dir).display()
    )
}

/// Whether the folder `dir` (absent) can be created: its nearest existing ancestor must be
/// a writable folder. Checked before the run starts, so the run never fails there later.
fn creatable(dir: &Path) -> anyhow::Result<()> {
    let mut at = dir;
    let ancestor = loop {
        match at.parent() {
            Some(p) if p.as_os_str().is_empty() => break Path::new("."),
            Some(p) if p.exists() => break p,
            Some(p) => at = p,
            None => break Path::new("/"),
        }
    };
    let refuse = |why: &str| {
        anyhow::anyhow!(
            "--results {}: cannot be created: {} {why} (give another folder)",
            dir.display(),
            ancestor.display()
        )
    };
    if !ancestor.is_dir() {
        return Err(refuse("is not a folder"));
    }
    if !crate::host::writable(ancestor) {
        return Err(refuse("is not writable"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_jobs_that_both_found_the_folder_empty_cannot_both_claim_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        claim_fresh(&dir, "job A").unwrap();
        let err = format!("{:#}", claim_fresh(&dir, "job B").unwrap_err());
        assert!(err.contains("claimed by another job (job A)"), "{err}");
        assert_eq!(
            std::fs::read_to_string(dir.join(CLAIM_FILE)).unwrap(),
            "job A"
        );
        confirm(&dir, "job A").unwrap();
        assert!(confirm(&dir, "job B").is_err());
    }

    #[test]
    fn a_claim_taken_over_after_the_check_stops_the_first_record() {
        let tmp = tempfile::tempdir().unwrap();
        claim_fresh(tmp.path(), "job A").unwrap();
        // Another job replaced the claim (a race the exclusive create cannot see, e.g. a
        // resume of a folder it believes its own): A's writers must not write.
        reclaim(tmp.path(), "job B").unwrap();
        let err = format!("{:#}", confirm(tmp.path(), "job A").unwrap_err());
        assert!(err.contains("claimed by another job (job B)"), "{err}");
    }

    #[test]
    fn a_node_local_folder_is_claimed_by_its_first_writer() {
        let tmp = tempfile::tempdir().unwrap();
        confirm(tmp.path(), "job A").unwrap();
        confirm(tmp.path(), "job A").unwrap();
        assert!(confirm(tmp.path(), "job B").is_err());
    }

    #[test]
    fn a_folder_holding_only_an_audit_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("audit.h5"), b"another run's audit").unwrap();
        let err = format!("{:#}", claim_fresh(tmp.path(), "job A").unwrap_err());
        assert!(
            err.contains("holds the records of a run (audit.h5)"),
            "{err}"
        );
        assert!(!tmp.path().join(CLAIM_FILE).exists());
    }
}
