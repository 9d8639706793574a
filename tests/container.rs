//! The container image and a cluster of separate hosts made of it (container/): README's
//! `docker run` command does what `make run` does and re-scores; the image's labels, user and
//! libraries (container/check-image); a run over four hosts through mpirun and ssh, scored,
//! audited, and its folder claimed across hosts; the repository's sbatch template under a
//! SLURM controller and one slurmd per host in the containers. Needs the Docker daemon,
//! docker-compose and the images aiperf:cpu and aiperf:testnode (scripts/dev/test builds them:
//! `IMAGES="cpu testnode" container/build`). The host-loss drills are in
//! tests/container_faults.rs.

mod common;
mod containers;

use std::path::Path;
use std::process::Command;

use containers::{launch_on, sh, Cluster, FOUR};

/// README's container commands, as written there.
fn readme_commands() -> (String, String) {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let find = |needle: &str| {
        readme
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("docker run") && l.contains(needle))
            .unwrap_or_else(|| panic!("README.md has no `docker run … {needle}` line"))
            .to_string()
    };
    (find("aiperf:cpu"), find(" score /results/"))
}

#[test]
fn readme_docker_run_does_make_run_and_rescores_on_the_host() {
    let Some(_turn) = containers::turn() else {
        return;
    };
    let (run, rescore) = readme_commands();
    assert!(
        run.ends_with("aiperf:cpu"),
        "the default command runs: {run}"
    );
    let tmp = tempfile::tempdir().unwrap();
    // As written, with a shorter run: one epoch, however fast the machine (DURATION, the
    // image's and make run's setting, only bounds it; flags after the image go to aiperf run).
    let shorter =
        run.replacen("docker run", "docker run -e DURATION=900", 1) + " run --stop-after-epochs 1";
    let out = sh(tmp.path(), &format!("mkdir -p results && {shorter}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{shorter}: {text}");
    assert!(text.contains("platform check under mpirun -np 3"), "{text}");
    assert!(text.contains("score (sustained)"), "{text}");
    // The records are on the host, in results/run-<start>/.
    let runs: Vec<_> = std::fs::read_dir(tmp.path().join("results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let name = runs[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("run-"), "{name}");
    for f in ["primary.h5", "group-0.h5"] {
        assert!(runs[0].join(f).is_file(), "{f} missing in {name}");
    }
    // README's re-score command with this run: intact records, the same digest.
    let again = rescore.replace("<run>", &name);
    let out = sh(tmp.path(), &again);
    let scored = String::from_utf8_lossy(&out.stdout);
    assert!(
        scored.contains("records                  intact"),
        "{again}: {scored}"
    );
    let digest = |t: &str| {
        t.split("run digest ")
            .nth(1)
            .map(|d| d[..64].to_string())
            .unwrap_or_else(|| panic!("no run digest in {t}"))
    };
    assert_eq!(digest(&scored), digest(&text));
    // A fashion-mnist run is never VALID (the official rules ask for ImageNet): exit 4.
    assert_eq!(out.status.code(), Some(4), "{scored}");
}

#[test]
fn the_images_are_labelled_run_as_a_user_and_resolve_every_library() {
    let Some(_turn) = containers::turn() else {
        return;
    };
    let check = Path::new(env!("CARGO_MANIFEST_DIR")).join("container/check-image");
    let out = common::output(Command::new(check).args(["aiperf:cpu", "cpu"]));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("user aiperf, every library resolves"),
        "{text}"
    );
    assert!(text.contains("cuda: false, 0 device(s)"), "{text}");
    // The label names what the binary says of itself (the check compares them; this reads
    // one back to be sure the label is there at all).
    let label = common::output(Command::new("docker").args([
        "image",
        "inspect",
        "-f",
        "{{index .Config.Labels \"io.aiperf.libtorch\"}}",
        "aiperf:cpu",
    ]));
    assert_eq!(String::from_utf8_lossy(&label.stdout).trim(), "2.13.0");
}

#[test]
fn a_run_on_four_hosts_scores_audits_and_its_folder_is_claimed_across_hosts() {
    let Some(_turn) = containers::turn() else {
        return;
    };
    let cluster = Cluster::up();
    cluster.write_data();
    let run = "/shared/results/multi";
    let mut job = cluster.spawn(
        "n1",
        &launch_on(
            &FOUR,
            2,
            &[
                "run",
                "--trainer",
                "real",
                "--data",
                "/shared/data",
                "--results",
                run,
                "--duration",
                "900",
                "--epochs",
                "2",
                "--batch-size",
                "8:24",
                "--threads",
                "1",
                "--precision",
                "fp32",
                "--memory-format",
                "nchw",
            ],
        ),
    );
    let log = common::StderrLog::follow(&mut job);
    log.wait_for(std::time::Duration::from_secs(120), |l| {
        l.contains(" epoch 1/")
    });
    // While the job runs on n1, a resume from n3 and a fresh run from n2 on its folder are
    // refused, naming the job.
    let resume = cluster.exec(
        "n3",
        &["/opt/aiperf/mpi-launch/mpirun-local", "3", "run"],
        &["--resume", run],
    );
    assert!(!resume.status.success());
    let said = String::from_utf8_lossy(&resume.stderr);
    assert!(
        said.contains("its job still runs") && said.contains("on n1"),
        "{said}"
    );
    let fresh = cluster.exec(
        "n2",
        &["/opt/aiperf/mpi-launch/mpirun-local", "3", "run"],
        &[
            "--trainer",
            "simulated",
            "--duration",
            "5",
            "--results",
            run,
        ],
    );
    assert!(!fresh.status.success());
    let said = String::from_utf8_lossy(&fresh.stderr);
    assert!(
        said.contains("claimed by another job") && said.contains("on n1"),
        "{said}"
    );
    // Then the job is stopped as at a time limit: it ends when told, on a machine of any
    // speed, with the epoch it waited for on record.
    cluster.terminate(&FOUR);
    let status = job.wait().unwrap();
    let text = log.finish();
    assert!(status.success(), "{text}");
    assert!(text.contains("9 ranks on 4 node(s)"), "{text}");
    // Scored where the records are (the shared folder, read on this machine): four hosts.
    let score = cluster.score_json("multi");
    let hosts: Vec<String> = score["platform"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["hosts"].as_array().unwrap().iter())
        .map(|h| h.as_str().unwrap().to_string())
        .collect();
    assert_eq!(hosts, ["n1", "n2", "n3", "n4"], "{score}");
    assert!(score["epochs"].as_u64().unwrap() > 0, "{score}");
    // Audited by other hosts than the run's primary (n2, n3), over ssh.
    let audit = cluster.exec(
        "n2",
        &launch_on(&["n2", "n3"], 1, &["audit", run]),
        &["--data", "/shared/data", "--trials", "1"],
    );
    let said = String::from_utf8_lossy(&audit.stdout) + String::from_utf8_lossy(&audit.stderr);
    assert!(audit.status.success(), "{said}");
    assert!(said.contains("audit digest "), "{said}");
}

#[test]
fn the_sbatch_template_runs_unchanged_under_slurm_on_the_hosts() {
    let Some(_turn) = containers::turn() else {
        return;
    };
    let cluster = Cluster::up();
    let out = cluster.exec(
        "n1",
        &["sbatch", "--wait", "--nodes=4", "--ntasks-per-node=3", "--cpus-per-task=1"],
        &[
            "--gpus-per-node=0",
            "--overcommit",
            "--time=10",
            "--output=/shared/slurm-%j.out",
            "--export=ALL,LAUNCHER=srun,RANKS_PER_NODE=2,CPU_BIND=none,AIPERF_CONFIG=fashion-mnist,AIPERF_RESULTS=/shared/results,AIPERF_ARGS=--trainer simulated --duration 8 --score-interval 2",
            "/opt/aiperf/mpi-launch/aiperf.sbatch",
        ],
    );
    let job_out = std::fs::read_dir(cluster.shared())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("slurm-"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .unwrap_or_default();
    assert!(
        out.status.success(),
        "{job_out}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        job_out.contains("srun-aiperf: 9 ranks on 4 node(s)"),
        "{job_out}"
    );
    assert!(job_out.contains("score (sustained)"), "{job_out}");
    let score = cluster.score_json("job-1");
    let hosts = &score["platform"][0]["hosts"];
    assert_eq!(
        hosts,
        &serde_json::json!(["n1", "n2", "n3", "n4"]),
        "{score}"
    );
}
