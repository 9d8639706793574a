//! Host loss on a cluster of separate hosts (container/compose.yaml): a training host killed
//! mid-epoch (`docker kill`), cut off from the others (`docker network disconnect`) and
//! frozen past the stall timeout (`docker pause`). Each time the job ends with a message
//! naming the lost host, no rank is left running (on the cut-off or frozen host either,
//! once it can be looked at), every record file stays readable and scores; after the kill,
//! `--resume` on the three hosts that remain continues the run and counts its down time.
//! Each drill prints what it measured (time to detect, epochs on record).

mod common;
mod containers;

use std::time::{Duration, Instant};

use containers::{launch_on, Cluster, FOUR};

/// The run every drill starts: 9 ranks in groups of 2 (so that 3 hosts can resume it),
/// the simulated trainer, a stall timeout below the run's length and above the hosts' ssh
/// keep-alive (5 s × 3): the launcher must notice a lost host before rank 0 aborts the
/// job, or OpenMPI's mpirun waits forever for the lost host's daemon to confirm the abort.
const STALL_S: u64 = 30;

/// How long a drill waits for the job to end after the fault (far beyond what it takes).
const END_LIMIT: Duration = Duration::from_secs(240);

fn start(cluster: &Cluster, name: &str) -> (std::process::Child, common::StderrLog) {
    let results = format!("/shared/results/{name}");
    let stall = STALL_S.to_string();
    let mut job = cluster.spawn(
        "n1",
        &launch_on(
            &FOUR,
            2,
            &[
                "run",
                "--trainer",
                "simulated",
                "--duration",
                "90",
                "--group-size",
                "2",
                "--stall-timeout",
                &stall,
                "--results",
                &results,
            ],
        ),
    );
    let log = common::StderrLog::follow(&mut job);
    // Every group trains (each has logged an epoch) before the fault.
    log.wait_for(Duration::from_secs(120), |l| {
        (0..4).all(|g| l.contains(&format!("group {g} model ")))
    });
    (job, log)
}

/// `docker ACTION… n3`, then the time until the job on n1 ends and its log.
fn fault_n3(
    cluster: &Cluster,
    (mut job, log): (std::process::Child, common::StderrLog),
    action: &[&str],
) -> (f64, String) {
    let mut args: Vec<String> = action.iter().map(|a| a.to_string()).collect();
    args.push(cluster.id("n3"));
    let at = Instant::now();
    let out = common::output(std::process::Command::new("docker").args(&args));
    assert!(out.status.success(), "docker {args:?}");
    let status = loop {
        if let Some(status) = job.try_wait().unwrap() {
            break status;
        }
        if at.elapsed() > END_LIMIT {
            let _ = job.kill();
            let _ = job.wait();
            panic!(
                "the job did not end after docker {args:?}: {}",
                log.finish()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let detected = at.elapsed().as_secs_f64();
    let text = log.finish();
    assert!(
        !status.success(),
        "the job must fail when a host is lost: {text}"
    );
    (detected, text)
}

/// No aiperf rank on `hosts`, waiting up to `limit` for the ranks to go.
fn no_rank_left(cluster: &Cluster, hosts: &[&str], limit: Duration) {
    let started = Instant::now();
    for h in hosts {
        while cluster.ranks_on(h) > 0 {
            assert!(started.elapsed() < limit, "ranks left running on {h}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// The records score (exit 4: a short simulated run is never VALID) and are intact as far
/// as they go; returns the epochs on record.
fn records_score(cluster: &Cluster, name: &str) -> u64 {
    let s = cluster.score_json(name);
    let integrity = s["integrity"].to_string();
    assert!(
        !integrity.contains("altered") && !integrity.contains("unreadable"),
        "{integrity}"
    );
    s["epochs"].as_u64().unwrap()
}

#[test]
fn a_killed_host_ends_the_job_and_the_other_hosts_resume_it() {
    let Some(_turn) = containers::turn() else {
        return;
    };
    let cluster = Cluster::up();
    let job = start(&cluster, "kill");
    let (detected, text) = fault_n3(&cluster, job, &["kill"]);
    assert!(
        text.contains("on node n3") || text.contains("Connection to n3 closed"),
        "the message names the lost host: {text}"
    );
    no_rank_left(&cluster, &["n1", "n2", "n4"], Duration::from_secs(60));
    let epochs = records_score(&cluster, "kill");
    // Leaders log an epoch once its row is written: what the log shows and the records lack
    // was lost with the host.
    let logged = text.matches(" val acc ").count();
    eprintln!(
        "drill kill: job ended {detected:.1} s after docker kill; {logged} epochs logged, {epochs} on record"
    );
    // The three hosts that remain resume it: 9 ranks, 3 a host, the groups of 2 it had.
    let resumed = cluster.exec(
        "n1",
        &[
            "mpirun",
            "-np",
            "9",
            "--host",
            "n1:3,n2:3,n4:3",
            "--bind-to",
            "none",
        ],
        &[
            "/opt/aiperf/bin/aiperf",
            "run",
            "--resume",
            "/shared/results/kill",
        ],
    );
    let said = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{said}");
    assert!(said.contains("this job takes its claim over"), "{said}");
    let s = cluster.score_json("kill");
    assert_eq!(s["resumes"].as_u64(), Some(1), "{s}");
    assert!(s["down_time_s"].as_f64().unwrap() > 0.0, "{s}");
    assert!(s["epochs"].as_u64().unwrap() > epochs, "{s}");
    assert!(
        s["integrity"].to_string().contains("intact"),
        "{}",
        s["integrity"]
    );
}

#[test]
fn a_host_cut_off_ends_the_job_and_its_own_ranks() {
    let Some(_turn) = containers::turn() else {
        return;
    };
    let cluster = Cluster::up();
    let job = start(&cluster, "cut");
    let net = cluster.network();
    let (detected, text) = fault_n3(&cluster, job, &["network", "disconnect", &net]);
    assert!(
        text.contains("on n3") || text.contains("server n3 not responding"),
        "the message names the lost host: {text}"
    );
    no_rank_left(&cluster, &["n1", "n2", "n4"], Duration::from_secs(60));
    // The cut-off host's group hears nothing from the primary for the stall timeout and
    // ends the job there too: it does not train and write records alone.
    let cut = Instant::now();
    no_rank_left(&cluster, &["n3"], Duration::from_secs(STALL_S * 3 + 60));
    let epochs = records_score(&cluster, "cut");
    eprintln!(
        "drill cut-off: job ended {detected:.1} s after the cut; the cut-off host's ranks {:.1} s later; {epochs} epochs on record",
        cut.elapsed().as_secs_f64()
    );
}

#[test]
fn a_host_frozen_past_the_stall_timeout_ends_the_job() {
    let Some(_turn) = containers::turn() else {
        return;
    };
    let cluster = Cluster::up();
    let job = start(&cluster, "pause");
    let (detected, text) = fault_n3(&cluster, job, &["pause"]);
    assert!(
        text.contains("on n3") || text.contains("server n3 not responding"),
        "the message names the lost host: {text}"
    );
    no_rank_left(&cluster, &["n1", "n2", "n4"], Duration::from_secs(60));
    // Thawed, the frozen host's ranks find their job gone and end.
    let thawed =
        common::output(std::process::Command::new("docker").args(["unpause", &cluster.id("n3")]));
    assert!(thawed.status.success());
    no_rank_left(&cluster, &["n3"], Duration::from_secs(STALL_S * 3 + 60));
    let epochs = records_score(&cluster, "pause");
    eprintln!(
        "drill pause: job ended {detected:.1} s after docker pause; {epochs} epochs on record"
    );
}
