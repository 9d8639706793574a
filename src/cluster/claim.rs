//! A results folder belongs to one job. Rank 0 refuses a `--results` folder that holds any
//! aiperf record (a run's, an audit's, or another job's claim), then claims it atomically by
//! an exclusive create of [`CLAIM_FILE`] holding this job's identity; every writer checks the
//! claim is still this job's just before its first record. A resume claims the folder the
//! same way: it is refused while the claim's job lives (its process on this host, or its
//! claim refreshed by its [`Heartbeat`]), and a claim whose job is provably gone is taken
//! over by one resume only. None of this relies on HDF5's file locking, which cluster
//! filesystems often turn off.

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
        super::bootstrap::host_name(),
    )
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

/// The file a resume creates, exclusively, while it replaces a gone job's claim: two
/// resumes never both take the folder over.
const TAKING_FILE: &str = ".aiperf-claim.taking";

/// How often a running job refreshes its claim ([`Heartbeat`]).
pub const BEAT: Duration = Duration::from_secs(2);

/// How long a resume watches a claim for a refresh before it calls its job gone: several
/// beats, so a busy machine's late beat is still seen.
pub const WATCH: Duration = Duration::from_millis(7_000);

/// A job's claim on its results folder, as its writers check it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Claim {
    /// This job's identity ([`identity`]), the claim's text.
    pub me: String,
    /// The claim of the gone job this (resumed) job took over, which a writer may replace
    /// where it finds it (a folder on a node's own disk).
    pub replaces: Option<String>,
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
    let here = holder.filter(|h| h.0 == super::bootstrap::host_name());
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
pub fn take_over(dir: &Path, stale: Option<&str>, me: &str) -> anyhow::Result<()> {
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

/// Before a writer's first record: the claim in `dir` must still be this job's. A folder on
/// another node's own disk (no shared filesystem) holds no claim yet, or the claim of the
/// gone job a resume took over: it is claimed there.
pub fn confirm(dir: &Path, claim: &Claim) -> anyhow::Result<()> {
    let ours = || read_claim(dir).is_ok_and(|t| t == claim.me);
    match read_claim(dir) {
        Ok(text) if text == claim.me => Ok(()),
        Ok(text) if Some(&text) == claim.replaces.as_ref() => {
            // Another writer of this job on the node may have taken it over first.
            take_over(dir, Some(&text), &claim.me).or_else(|e| if ours() { Ok(()) } else { Err(e) })
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

/// Rank 0's refresh of its claim while the job lives (every [`BEAT`], while the claim is
/// still this job's); it stops when dropped.
pub struct Heartbeat {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    /// Starts refreshing `dir`'s claim, which holds `me`.
    pub fn start(dir: &Path, me: &str) -> Heartbeat {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, dir, me) = (Arc::clone(&stop), dir.to_path_buf(), me.to_string());
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
    if !crate::host::writable(ancestor) {
        return Err(refuse("is not writable"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(me: &str) -> Claim {
        Claim {
            me: me.into(),
            replaces: None,
        }
    }

    /// The identity of a process of this host that has ended.
    fn gone_identity() -> String {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        format!(
            "aiperf run on {} pid {pid} started 1 (no batch job), run start 0.000, nonce 000000001",
            crate::cluster::bootstrap::host_name()
        )
    }

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
        confirm(&dir, &ours("job A")).unwrap();
        assert!(confirm(&dir, &ours("job B")).is_err());
    }

    #[test]
    fn a_claim_taken_over_after_the_check_stops_the_first_record() {
        let tmp = tempfile::tempdir().unwrap();
        claim_fresh(tmp.path(), "job A").unwrap();
        // Another job replaced the claim (a race the exclusive create cannot see, e.g. a
        // resume of a folder it believes its own): A's writers must not write.
        take_over(tmp.path(), Some("job A"), "job B").unwrap();
        let err = format!("{:#}", confirm(tmp.path(), &ours("job A")).unwrap_err());
        assert!(err.contains("claimed by another job (job B)"), "{err}");
    }

    #[test]
    fn a_node_local_folder_is_claimed_by_its_first_writer() {
        let tmp = tempfile::tempdir().unwrap();
        confirm(tmp.path(), &ours("job A")).unwrap();
        confirm(tmp.path(), &ours("job A")).unwrap();
        assert!(confirm(tmp.path(), &ours("job B")).is_err());
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

    #[test]
    fn a_resume_of_a_folder_whose_job_runs_is_refused_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let me = identity(1.0);
        claim_fresh(tmp.path(), &me).unwrap();
        let started = Instant::now();
        let err = format!("{:#}", check_resume(tmp.path()).unwrap_err());
        assert!(
            err.contains("its job still runs")
                && err.contains(&format!("its process {}", std::process::id())),
            "{err}"
        );
        assert!(
            started.elapsed() < WATCH,
            "a process of this host needs no watch"
        );
    }

    #[test]
    fn a_claim_refreshed_by_its_heartbeat_is_alive_though_its_process_is_not_seen() {
        // A job whose process this host cannot see (another container of the same host
        // name, another host): its heartbeat alone keeps the folder.
        let tmp = tempfile::tempdir().unwrap();
        let other = gone_identity();
        claim_fresh(tmp.path(), &other).unwrap();
        let _beat = Heartbeat::start(tmp.path(), &other);
        let err = format!("{:#}", check_resume(tmp.path()).unwrap_err());
        assert!(err.contains("its claim was refreshed within"), "{err}");
    }

    #[test]
    fn a_gone_job_is_taken_over_by_one_resume_only() {
        let tmp = tempfile::tempdir().unwrap();
        let gone = gone_identity();
        claim_fresh(tmp.path(), &gone).unwrap();
        // Both resumes found the job gone; the first takes the folder, the second is refused.
        let stale = check_resume(tmp.path()).unwrap();
        assert_eq!(stale.as_deref(), Some(gone.as_str()));
        take_over(tmp.path(), stale.as_deref(), "resume A").unwrap();
        let err = format!(
            "{:#}",
            take_over(tmp.path(), stale.as_deref(), "resume B").unwrap_err()
        );
        assert!(err.contains("claimed by another job (resume A)"), "{err}");
        assert_eq!(read_claim(tmp.path()).unwrap(), "resume A");
        assert!(!tmp.path().join(TAKING_FILE).exists());
        // A takeover under way (its marker present) refuses every other resume at once.
        std::fs::write(tmp.path().join(TAKING_FILE), "resume C").unwrap();
        let err = format!("{:#}", check_resume(tmp.path()).unwrap_err());
        assert!(
            err.contains("another resume is taking the folder over (resume C)"),
            "{err}"
        );
        let err = format!(
            "{:#}",
            take_over(tmp.path(), Some("resume A"), "resume D").unwrap_err()
        );
        assert!(err.contains("another resume is taking"), "{err}");
        assert_eq!(read_claim(tmp.path()).unwrap(), "resume A");
    }

    #[test]
    fn a_node_local_claim_of_the_gone_job_is_replaced_by_the_resumed_one() {
        let tmp = tempfile::tempdir().unwrap();
        claim_fresh(tmp.path(), "job A").unwrap();
        let resumed = Claim {
            me: "job B".into(),
            replaces: Some("job A".into()),
        };
        confirm(tmp.path(), &resumed).unwrap();
        confirm(tmp.path(), &resumed).unwrap();
        assert_eq!(read_claim(tmp.path()).unwrap(), "job B");
        let third = Claim {
            me: "job C".into(),
            replaces: Some("job A".into()),
        };
        assert!(confirm(tmp.path(), &third).is_err());
    }

    #[test]
    fn an_identity_names_its_host_pid_and_process_start() {
        let me = identity(3.0);
        let (host, pid, started) = holder_of(&me).unwrap();
        assert_eq!(host, crate::cluster::bootstrap::host_name());
        assert_eq!(pid, std::process::id());
        assert_eq!(started, process_start(pid));
        assert!(started.is_some());
    }
}
