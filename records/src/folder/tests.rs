//! The results folder's claim, tested on temporary folders: two jobs, takeovers, heartbeats.

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
        host_name()
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
    let held = claim_fresh(tmp.path(), &other).unwrap();
    let _beat = Heartbeat::start(&held);
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
    assert_eq!(host, host_name());
    assert_eq!(pid, std::process::id());
    assert_eq!(started, process_start(pid));
    assert!(started.is_some());
}
