//! Helpers of the container tests: the prerequisites, one cluster at a time, and a cluster
//! of four hosts (container/cluster) with commands on its hosts.

#![allow(dead_code)] // each test binary uses its own subset

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The cluster's hosts.
pub const FOUR: [&str; 4] = ["n1", "n2", "n3", "n4"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A container test's turn: the tests of one binary run one after the other (each cluster
/// takes both cores), and only where Docker, docker-compose and the images are here. Under
/// `make test` (AIPERF_REQUIRE_PREREQS=1) a missing one fails the test; elsewhere the test
/// says what is missing and does nothing (`None`).
pub fn turn() -> Option<std::sync::MutexGuard<'static, ()>> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let turn = ONE.lock().unwrap_or_else(|e| e.into_inner());
    docker_ready().then_some(turn)
}

fn docker_ready() -> bool {
    let missing = if !run_ok(Command::new("docker").arg("info")) {
        Some("the Docker daemon does not answer (docker info)")
    } else if !run_ok(Command::new("docker-compose").arg("version")) {
        Some("docker-compose is not installed")
    } else if !["aiperf:cpu", "aiperf:testnode"]
        .iter()
        .all(|i| run_ok(Command::new("docker").args(["image", "inspect", i])))
    {
        Some("the images aiperf:cpu and aiperf:testnode are not built (IMAGES=\"cpu testnode\" container/build)")
    } else {
        None
    };
    let Some(why) = missing else { return true };
    assert!(
        std::env::var("AIPERF_REQUIRE_PREREQS").as_deref() != Ok("1"),
        "{why}: make test installs and builds every prerequisite"
    );
    eprintln!("not run: {why}");
    false
}

fn run_ok(cmd: &mut Command) -> bool {
    cmd.output().map(|o| o.status.success()).unwrap_or(false)
}

/// `bash -c CMD` in `cwd`.
pub fn sh(cwd: &Path, cmd: &str) -> Output {
    crate::common::output(Command::new("bash").arg("-c").arg(cmd).current_dir(cwd))
}

/// The command that starts `aiperf ARGS` with mpi-launch/mpirun-aiperf on `hosts`,
/// `per_host` ranks each plus the primary on the first, bound to no core (the hosts share
/// this machine's two).
pub fn launch_on(hosts: &[&str], per_host: usize, args: &[&str]) -> Vec<String> {
    let mut cmd = vec![
        "env".to_string(),
        format!("NODES={}", hosts.join(" ")),
        format!("RANKS_PER_NODE={per_host}"),
        "BIND=none".to_string(),
        "/opt/aiperf/mpi-launch/mpirun-aiperf".to_string(),
    ];
    cmd.extend(args.iter().map(|a| a.to_string()));
    cmd
}

/// A cluster of the four hosts of container/compose.yaml, taken down when dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts the hosts and waits until each runs sshd and SLURM sees all four.
    pub fn up() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let c = Cluster { dir };
        let out = c.script(&["up"]);
        assert!(
            out.status.success(),
            "cluster up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        c
    }

    fn script(&self, verb: &[&str]) -> Output {
        let mut cmd = Command::new(root().join("container/cluster"));
        cmd.arg(verb[0]).arg(self.dir.path()).args(&verb[1..]);
        crate::common::output(&mut cmd)
    }

    /// The folder every host mounts at /shared.
    pub fn shared(&self) -> PathBuf {
        self.dir.path().join("shared")
    }

    /// A small data set in /shared/data (the tests' 8×8 images, 4 classes).
    pub fn write_data(&self) {
        let data = self.shared().join("data");
        std::fs::create_dir_all(&data).unwrap();
        crate::common::write_split(&data, "train", 384, 1);
        crate::common::write_split(&data, "val", 480, 2);
    }

    fn command<S: AsRef<OsStr>>(&self, host: &str, cmd: &[S], args: &[&str]) -> Command {
        let mut c = Command::new(root().join("container/cluster"));
        c.arg("exec").arg(self.dir.path()).arg(host);
        c.args(cmd).args(args);
        c
    }

    /// Runs `CMD ARGS` on `host` as the user aiperf.
    pub fn exec<S: AsRef<OsStr>>(&self, host: &str, cmd: &[S], args: &[&str]) -> Output {
        crate::common::output(&mut self.command(host, cmd, args))
    }

    /// Starts `CMD` on `host` (stdout and stderr piped).
    pub fn spawn<S: AsRef<OsStr>>(&self, host: &str, cmd: &[S]) -> std::process::Child {
        crate::common::spawn(&mut self.command(host, cmd, &[]))
    }

    /// The container of `host`.
    pub fn id(&self, host: &str) -> String {
        let out = self.script(&["id", host]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The hosts' private network.
    pub fn network(&self) -> String {
        let out = self.script(&["network"]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// SIGTERM to every aiperf rank on `hosts`, as SLURM sends at a job's time limit: the run
    /// abandons the epochs in progress, seals its records and ends.
    pub fn terminate(&self, hosts: &[&str]) {
        for h in hosts {
            let out = crate::common::output(Command::new("docker").args([
                "exec",
                &self.id(h),
                "pkill",
                "-TERM",
                "-x",
                "aiperf",
            ]));
            assert!(out.status.success(), "no aiperf rank on {h} to stop");
        }
    }

    /// aiperf processes (ranks) running on `host`.
    pub fn ranks_on(&self, host: &str) -> usize {
        let out = crate::common::output(Command::new("docker").args([
            "exec",
            &self.id(host),
            "pgrep",
            "-x",
            "aiperf",
        ]));
        String::from_utf8_lossy(&out.stdout).lines().count()
    }

    /// `aiperf score --json` of /shared/results/NAME, read on this machine.
    pub fn score_json(&self, name: &str) -> serde_json::Value {
        let dir = self.shared().join("results").join(name);
        let out = crate::common::output(
            Command::new(env!("CARGO_BIN_EXE_aiperf"))
                .args(["score", "--json"])
                .arg(&dir),
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        match v {
            serde_json::Value::Array(mut a) => a.remove(0),
            v => v,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.script(&["down"]);
    }
}
