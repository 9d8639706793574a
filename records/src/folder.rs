//! The results folder, owned by one job: [`Claimed`] is the only way to a run's writers
//! ([`crate::writer::PrimaryWriter`], [`crate::writer::GroupWriter`] take it, not a path), and
//! a `Claimed` exists only once this job holds the folder's claim. Rank 0 refuses a folder
//! that holds any aiperf record (a run's, an audit's, or another job's claim), then claims it
//! atomically by an exclusive create of [`CLAIM_FILE`] holding this job's identity; every
//! other writer confirms the claim is still this job's before its first record. A resume
//! claims the folder the same way: refused while the claim's job lives (its process on this
//! host, or its claim refreshed by its [`Heartbeat`]), and a claim whose job is provably gone
//! is taken over by one resume only. None of this relies on HDF5's file locking, which
//! cluster filesystems often turn off.
//!
//! A writer cannot be opened on a bare path, nor a `Claimed` made but by holding the claim:
//!
//! ```compile_fail
//! # fn f(meta: &aiperf_records::writer::RunMeta) {
//! let p = aiperf_records::writer::PrimaryWriter::create(std::path::Path::new("results/x"), meta);
//! # }
//! ```
//!
//! ```compile_fail
//! let forged = aiperf_records::folder::Claimed {
//!     dir: "results/x".into(),
//!     claim: aiperf_records::folder::Claim::new("me"),
//! };
//! ```
//!
//! ```
//! # fn f(meta: &aiperf_records::writer::RunMeta) -> anyhow::Result<()> {
//! use aiperf_records::folder::{claim_fresh, identity};
//! let folder = claim_fresh(std::path::Path::new("results/x"), &identity(0.0))?;
//! let p = aiperf_records::writer::PrimaryWriter::create(&folder, meta)?;
//! # Ok(()) }
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    let pid = std::process::id();
    let started = process_start(pid).map_or(String::new(), |t| format!(" started {t}"));
    format!(
        "aiperf run on {} pid {pid}{started} ({job}), run start {t0_s:.3}, nonce {nanos:09}",
        host_name(),
    )
}

/// This host's name, as the kernel has it (`/proc/sys/kernel/hostname`; empty if unreadable).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Whether this process may create entries in folder `dir` (`access(2)`, write and search).
pub fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// When process `pid` of this host started, in clock ticks since boot (`/proc/PID/stat`'s
/// 22nd field): with the pid, it names one process, though pids are reused. `None` when
/// no such process runs (an ended process not yet reaped, a zombie, runs no more).
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields 3… follow its closing parenthesis.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.nth(18)?.parse().ok()
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
            n == crate::schema::PRIMARY_FILE
                || n == crate::schema::AUDIT_FILE
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
pub fn claim_fresh(dir: &Path, identity: &str) -> anyhow::Result<Claimed> {
    check_fresh(dir)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("--results {}: cannot be created: {e}", dir.display()))?;
    if create_claim(dir, identity)? {
        Ok(Claimed::new(dir, identity, None))
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

/// The file a resume creates, exclusively, while it replaces a gone job's claim: two
/// resumes never both take the folder over.
const TAKING_FILE: &str = ".aiperf-claim.taking";

/// How often a running job refreshes its claim ([`Heartbeat`]).
pub const BEAT: Duration = Duration::from_secs(2);

/// How long a resume watches a claim for a refresh before it calls its job gone: several
/// beats, so a busy machine's late beat is still seen.
pub const WATCH: Duration = Duration::from_millis(7_000);

/// A results folder this job holds: made only by [`claim_fresh`], [`take_over`] and
/// [`confirm`], each of which has seen this job's claim in place; the run's writers take it.
#[derive(Debug)]
pub struct Claimed {
    dir: PathBuf,
    claim: Claim,
}

impl Claimed {
    fn new(dir: &Path, me: &str, replaces: Option<&str>) -> Claimed {
        Claimed {
            dir: dir.to_path_buf(),
            claim: Claim {
                me: me.into(),
                replaces: replaces.map(String::from),
            },
        }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The claim held, which the job's other ranks confirm with [`confirm`].
    pub fn claim(&self) -> &Claim {
        &self.claim
    }
}

/// A job's claim on its results folder, as its writers check it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Claim {
    /// This job's identity ([`identity`]), the claim's text.
    pub me: String,
    /// The claim of the gone job this (resumed) job took over, which a writer may replace
    /// where it finds it (a folder on a node's own disk).
    pub replaces: Option<String>,
}

impl Claim {
    /// A fresh claim by the job `me` (one that takes no gone job's claim over).
    pub fn new(me: &str) -> Claim {
        Claim {
            me: me.into(),
            replaces: None,
        }
    }
}

/// Whether a claim's job still runs, and why it is said so.
enum Liveness {
    Alive(String),
    Gone(String),
}

fn read_claim(dir: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(claim_path(dir))
}

/// Host, pid and process start as a claim's text ([`identity`]) names them.
fn holder_of(text: &str) -> Option<(&str, u32, Option<u64>)> {
    let mut words = text.strip_prefix("aiperf run on ")?.split_whitespace();
    let host = words.next()?;
    let pid = words.next().filter(|w| *w == "pid").and(words.next())?;
    let started = (words.next() == Some("started"))
        .then(|| words.next()?.parse().ok())
        .flatten();
    Some((host, pid.parse().ok()?, started))
}

/// Whether the job that wrote claim `text` in `dir` still runs: its process on this host
/// runs, or its claim is refreshed within [`WATCH`]; gone only when neither (a host of the
/// same name in another container proves nothing by its process table alone).
fn liveness(dir: &Path, text: &str) -> Liveness {
    let holder = holder_of(text);
    let here = holder.filter(|h| h.0 == host_name());
    if let Some((host, pid, started)) = here {
        let runs = process_start(pid)
            .is_some_and(|t| started.map_or(pid != std::process::id(), |s| s == t));
        if runs {
            return Liveness::Alive(format!("its process {pid} runs on {host}"));
        }
    }
    let stamp = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let first = stamp(&claim_path(dir));
    let watched = Instant::now();
    while watched.elapsed() < WATCH {
        std::thread::sleep(Duration::from_millis(200));
        if read_claim(dir).ok().as_deref() != Some(text) {
            return Liveness::Alive("its claim was replaced while it was watched".into());
        }
        if stamp(&claim_path(dir)) != first {
            return Liveness::Alive(format!(
                "its claim was refreshed within {} s",
                WATCH.as_secs()
            ));
        }
    }
    let process = match here {
        Some((host, pid, _)) => format!("its process {pid} no longer runs on {host}, and "),
        None => String::new(),
    };
    Liveness::Gone(format!(
        "{process}its claim went unrefreshed for {} s",
        WATCH.as_secs()
    ))
}

/// Rank 0, resuming, before the records are opened: refused while the folder's job runs;
/// the claim of a job provably gone, which this job will take over (said so); `None` where
/// the folder holds no claim.
pub fn check_resume(dir: &Path) -> anyhow::Result<Option<String>> {
    let text = match read_claim(dir) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => bail!("--resume {}: cannot read its claim: {e}", dir.display()),
    };
    if let Ok(taker) = std::fs::read_to_string(dir.join(TAKING_FILE)) {
        return Err(being_taken(dir, &taker));
    }
    match liveness(dir, &text) {
        Liveness::Alive(why) => bail!(
            "--resume {}: its job still runs ({}: {why}): a run is resumed once its job has ended; wait for that job, or stop it (scancel, or end its mpirun) and resume then",
            dir.display(),
            text.trim()
        ),
        Liveness::Gone(why) => {
            log::info!(
                "--resume {}: the job that held it is gone ({why}); this job takes its claim over ({})",
                dir.display(),
                text.trim()
            );
            Ok(Some(text))
        }
    }
}

/// The refusal while another resume takes the folder over.
fn being_taken(dir: &Path, taker: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "--resume {}: another resume is taking the folder over ({}): one job resumes a run; if no such job runs, remove {}",
        dir.display(),
        taker.trim(),
        dir.join(TAKING_FILE).display()
    )
}

/// The folder becomes this job's (`me`) in place of claim `stale`, which
/// [`check_resume`] found gone (`None`: it held no claim): one taker at a time (an exclusive
/// create of `.aiperf-claim.taking`), and only while the claim is still `stale` (another resume
/// may have taken it since).
pub fn take_over(dir: &Path, stale: Option<&str>, me: &str) -> anyhow::Result<Claimed> {
    replace_claim(dir, stale, me)?;
    Ok(Claimed::new(dir, me, stale))
}

/// [`take_over`]'s work: the claim file replaced, or created where there was none.
fn replace_claim(dir: &Path, stale: Option<&str>, me: &str) -> anyhow::Result<()> {
    let Some(stale) = stale else {
        return match create_claim(dir, me)? {
            true => Ok(()),
            false => Err(claimed_by_another(dir)),
        };
    };
    let refuse = |e: std::io::Error| {
        anyhow::anyhow!("--resume {}: cannot claim the folder: {e}", dir.display())
    };
    let tmp = written_aside(dir, me).map_err(refuse)?;
    let marker = dir.join(TAKING_FILE);
    if let Err(e) = std::fs::hard_link(&tmp, &marker) {
        let _ = std::fs::remove_file(&tmp);
        return Err(match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                being_taken(dir, &std::fs::read_to_string(&marker).unwrap_or_default())
            }
            _ => refuse(e),
        });
    }
    let taken = if read_claim(dir).ok().as_deref() == Some(stale) {
        std::fs::rename(&tmp, claim_path(dir)).map_err(refuse)
    } else {
        Err(claimed_by_another(dir))
    };
    let _ = std::fs::remove_file(&tmp);
    let _ = std::fs::remove_file(&marker);
    taken
}

/// Before a writer's first record, on any rank: the claim in `dir` must still be this job's.
/// A folder on another node's own disk (no shared filesystem) may not exist yet (it is
/// created), may hold no claim yet, or the claim of the gone job a resume took over: it is
/// claimed there.
pub fn confirm(dir: &Path, claim: &Claim) -> anyhow::Result<Claimed> {
    confirmed(dir, claim)?;
    Ok(Claimed {
        dir: dir.to_path_buf(),
        claim: claim.clone(),
    })
}

fn confirmed(dir: &Path, claim: &Claim) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("--results {}: cannot be created: {e}", dir.display()))?;
    let ours = || read_claim(dir).is_ok_and(|t| t == claim.me);
    match read_claim(dir) {
        Ok(text) if text == claim.me => Ok(()),
        Ok(text) if Some(&text) == claim.replaces.as_ref() => {
            // Another writer of this job on the node may have taken it over first.
            replace_claim(dir, Some(&text), &claim.me)
                .or_else(|e| if ours() { Ok(()) } else { Err(e) })
        }
        Ok(_) => Err(claimed_by_another(dir)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Claimed in between, by this job's other writer on the node or by another job:
            // then the claim there decides.
            if create_claim(dir, &claim.me)? || ours() {
                Ok(())
            } else {
                Err(claimed_by_another(dir))
            }
        }
        Err(e) => bail!("--results {}: cannot read its claim: {e}", dir.display()),
    }
}

/// `dir` held by the job `me` with a fresh claim ([`Claim::new`] confirmed): how a tool or
/// test that is its own job gets a folder its writers may write.
pub fn held_by(dir: &Path, me: &str) -> anyhow::Result<Claimed> {
    confirm(dir, &Claim::new(me))
}

/// Rank 0's refresh of its claim while the job lives (every [`BEAT`], while the claim is
/// still this job's); it stops when dropped.
pub struct Heartbeat {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    /// Starts refreshing the claim of `folder`.
    pub fn start(folder: &Claimed) -> Heartbeat {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, dir, me) = (
            Arc::clone(&stop),
            folder.dir.clone(),
            folder.claim.me.clone(),
        );
        let thread = std::thread::spawn(move || {
            let mut last = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if last.elapsed() < BEAT {
                    continue;
                }
                last = Instant::now();
                if read_claim(&dir).is_ok_and(|t| t == me) {
                    let touched = std::fs::File::options()
                        .write(true)
                        .open(claim_path(&dir))
                        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                    if let Err(e) = touched {
                        log::debug!("claim of {} not refreshed: {e}", dir.display());
                    }
                }
            }
        });
        Heartbeat {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
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
    if !writable(ancestor) {
        return Err(refuse("is not writable"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
