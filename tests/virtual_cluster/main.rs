//! aiperf as a cluster: a virtual 3-node cluster on this machine (`mpi-launch/virtual-cluster`:
//! network namespaces with their own hostnames and /tmp, veths to a bridge, TCP between the
//! nodes, one OpenMPI daemon per node through the launch agent, SLURM with one slurmd per
//! node). One test function runs the scenarios in sequence (they share the cluster and the
//! machine's two cores) and takes the cluster down at the end, also when a scenario fails:
//!
//! 1. real training on tiny data across 3 nodes with the launchers' placement (the primary
//!    plus 2 ranks on node1, 2 ranks on node2 and node3; the primary + 1 on node1 would
//!    make unequal groups, which aiperf refuses): one group per node, the hosts recorded
//!    per rank, exchange bytes, bit-identical parameters, learning, traffic over the veths,
//!    records scored;
//! 2. the same through `sbatch --nodes=3 mpi-launch/aiperf.sbatch` (srun --mpi=pmix, real
//!    trainer), and the template's `mpirun` inside the job (simulated trainer);
//! 3. a node lost mid-run (every process in node3's namespace SIGKILLed): the run ends
//!    non-zero naming node3, every completed epoch is readable, and `--resume` on the two
//!    surviving nodes says what it cannot do (fewer ranks, unequal nodes) and does what it
//!    can (the same 7 ranks and 3 groups packed onto node1 and node2);
//! 4. `aiperf comm-bench` across the nodes: world figures (over the network) beside the
//!    within-node groups' (shared memory) (in `exchange.rs`, as 5 is);
//! 5. the node-aware exchange (`--exchange hierarchical`) across the nodes in `dp-check`:
//!    bit-identical ranks, and the flat exchange's training up to summation order; `auto`
//!    (the default) times both there and trains with the faster, bit for bit;
//! 6. the weak-scaling study as a job, `sbatch mpi-launch/weak-scaling.sbatch`, on 1 and 2
//!    nodes through SLURM (in `study.rs`).
//!
//! It needs root (namespaces, veths, bridge) and the Debian packages that scripts/dev/setup
//! installs; under `make test` (AIPERF_REQUIRE_PREREQS=1) a missing one fails the test.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aiperf_records::score;

#[path = "../common/mod.rs"]
mod common;
mod exchange;
mod study;
use common::{wait_released, write_split};
use exchange::{comm_bench_across_nodes, hierarchical_exchange_across_nodes};
use study::weak_scaling_study_as_a_job;

const TRAIN: u64 = 384;
const VAL: u64 = 96;
/// The placement of every scenario but the resumed one: world rank → host.
const HOSTS_3X2: [&str; 7] = [
    "node1", "node1", "node1", "node2", "node2", "node3", "node3",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn vc() -> PathBuf {
    root().join("mpi-launch/virtual-cluster")
}

/// What the scenarios need; each missing piece named with what provides it.
fn missing_prerequisites() -> Vec<String> {
    let mut missing = Vec::new();
    let uid = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        missing.push(
            "root (network namespaces, veths and a bridge need CAP_NET_ADMIN, the nodes' hostnames and /tmp CAP_SYS_ADMIN)"
                .to_string(),
        );
    }
    for (tool, package) in [
        ("ip", "iproute2"),
        ("tc", "iproute2"),
        ("ping", "iputils-ping"),
        ("nsenter", "util-linux"),
        ("unshare", "util-linux"),
        ("flock", "util-linux"),
        ("timeout", "coreutils"),
        ("mpirun", "openmpi-bin"),
        ("munged", "munge"),
        ("slurmctld", "slurmctld"),
        ("slurmd", "slurmd"),
        ("sbatch", "slurm-client"),
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            missing.push(format!(
                "{tool} (Debian: {package}; scripts/dev/setup installs it)"
            ));
        }
    }
    missing
}

/// The cluster for the test's duration: `down` on drop, so a failing scenario leaves nothing.
struct Cluster;

impl Cluster {
    fn up(nodes: u32) -> Cluster {
        // A cluster left by an interrupted earlier run is this project's: replace it.
        let _ = Command::new(vc()).arg("down").output();
        let out = Command::new(vc())
            .args(["up", &nodes.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "up {nodes}: {}", text(&out));
        Cluster
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let out = Command::new(vc()).arg("down").output();
        if let Ok(out) = out {
            if !out.status.success() {
                eprintln!("virtual-cluster down: {}", text(&out));
            }
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `cmd` under `timeout` (generous: the machine may be loaded), stdout and stderr kept.
fn run_for(limit_s: u32, cmd: &mut Command) -> Output {
    let mut t = Command::new("timeout");
    t.args(["-k", "10", &limit_s.to_string()])
        .arg(cmd.get_program());
    t.args(cmd.get_args());
    if let Some(d) = cmd.get_current_dir() {
        t.current_dir(d);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => t.env(k, v),
            None => t.env_remove(k),
        };
    }
    let out = t.output().unwrap();
    assert_ne!(out.status.code(), Some(124), "timed out: {}", text(&out));
    out
}

/// The real trainer's flags for the tiny data.
fn real_args(data: &Path, duration_s: u32) -> Vec<String> {
    let mut a: Vec<String> = ["--trainer", "real", "--data"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.push(data.display().to_string());
    for s in [
        "--epochs",
        "4",
        "--batch-size",
        "8:24",
        "--threads",
        "1",
        "--score-interval",
        "2",
        "--status-interval",
        "5",
        "--monitor-interval",
        "2",
        "--duration",
    ] {
        a.push(s.to_string());
    }
    a.push(duration_s.to_string());
    a
}

/// Each rank's host, from primary.h5's `hosts` attribute (a JSON list).
fn recorded_hosts(dir: &Path) -> Vec<String> {
    let f = hdf5::File::open(dir.join("primary.h5")).unwrap();
    let json = f
        .attr("hosts")
        .unwrap()
        .read_scalar::<hdf5::types::VarLenUnicode>()
        .unwrap();
    serde_json::from_str(json.as_str()).unwrap()
}

/// Bytes received by the bridge from node k's veth (the host side's rx counter).
fn link_bytes(k: u32) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/aiperf-v{k}/statistics/rx_bytes"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The records of a 3-node run with the launchers' placement: hosts per rank, one group per
/// node of 2 ranks each, epochs with exchanged bytes, a score. `real`: the real trainer's
/// counts (images per epoch, exchange per step).
fn check_three_node_records(dir: &Path, real: bool) {
    assert_eq!(recorded_hosts(dir), HOSTS_3X2, "hosts in {}", dir.display());
    let run = aiperf_records::read_run(dir).unwrap();
    assert_eq!(run.info.world_size, 7);
    // One group per node: OpenMPI saw three nodes (a single shared-memory node would make
    // one group of 6), and each group's 2 ranks shared one (the split is by node).
    assert_eq!(run.info.groups, 3, "one group per node");
    assert_eq!(run.groups.len(), 3);
    for g in &run.groups {
        assert_eq!(g.ranks, 2, "group {}: 2 ranks on its node", g.group);
        assert!(!g.epochs.is_empty(), "group {} recorded no epoch", g.group);
        for e in &g.epochs {
            if real {
                assert_eq!(e.val_images, VAL);
                assert!(e.train_images > 0 && e.train_images <= TRAIN);
                // Every step exchanges the gradient bucket between the node's two ranks.
                assert!(
                    e.allreduce_bytes > 0,
                    "group {}: nothing exchanged",
                    g.group
                );
            }
            assert!(e.val_accuracy.is_finite() && (0.0..=1.0).contains(&e.val_accuracy));
        }
    }
    let s = score(&run, 2.0).unwrap();
    assert!(s.ops_per_s > 0.0 && s.accelerators == 6, "{s:?}");
    let epochs: Vec<usize> = run.groups.iter().map(|g| g.epochs.len()).collect();
    eprintln!(
        "{}: epochs per group {epochs:?}, best accuracy {:.3}, {:.3e} OPS",
        dir.display(),
        s.best_accuracy,
        s.ops_per_s
    );
    if real {
        // The quadrant task is easy: chance is 0.25.
        assert!(s.best_accuracy > 0.5, "best accuracy {}", s.best_accuracy);
    }
}

/// Collects a child's stderr on a thread.
struct Log {
    text: Arc<Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Log {
    fn follow(child: &mut Child) -> Log {
        let text = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&text);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut t = sink.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        });
        Log { text, reader }
    }

    fn wait_for(&self, limit: Duration, done: impl Fn(&str) -> bool) {
        let started = Instant::now();
        while !done(&self.text.lock().unwrap()) {
            assert!(
                started.elapsed() < limit,
                "not in the log in time: {}",
                self.text.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn finish(self) -> String {
        self.reader.join().unwrap();
        Arc::try_unwrap(self.text).unwrap().into_inner().unwrap()
    }
}

/// Waits for `child` at most `limit` (then kills it and fails).
fn wait_limited(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn aiperf_env(cmd: &mut Command) -> &mut Command {
    cmd.env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
        .env("RUST_LOG", "info")
}

/// Scenario 1: real training across 3 nodes through `virtual-cluster run`.
fn training_across_three_nodes(work: &Path, data: &Path) {
    // The primary + 1 rank on node1 and 2 on the others would make groups of 1, 2 and 2:
    // aiperf refuses unequal groups (before any training), hence the launchers' rule.
    let unequal = run_for(
        120,
        aiperf_env(Command::new(vc()).args(["run", "--ranks-per-node", "1,2,2", "--results"]))
            .arg(work.join("unequal"))
            .arg("--")
            .args(real_args(data, 30)),
    );
    let t = text(&unequal);
    assert!(!unequal.status.success(), "{t}");
    assert!(
        t.contains("nodes hold different numbers of replica ranks ([1, 2, 2]"),
        "{t}"
    );
    let results = work.join("train");
    let before: Vec<u64> = (1..=3).map(link_bytes).collect();
    let out = run_for(
        300,
        aiperf_env(Command::new(vc()).args(["run", "--ranks-per-node", "2", "--results"]))
            .arg(&results)
            .arg("--")
            .args(real_args(data, 20)),
    );
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("7 ranks on 3 node(s) (node1:3,node2:2,node3:2"),
        "{log}"
    );
    assert!(log.contains("score (sustained)"), "{log}");
    assert!(log.contains("bit-identical on all 2 ranks"), "{log}");
    for g in 0..3 {
        assert!(
            log.contains(&format!("group {g} model")),
            "group {g}: {log}"
        );
    }
    assert!(log.contains(&format!("records in {}", results.display())));
    check_three_node_records(&results, true);
    // The leaders on node2 and node3 talked to the primary on node1 over their links.
    for k in 2..=3u32 {
        let sent = link_bytes(k) - before[k as usize - 1];
        assert!(
            sent > 10_000,
            "node{k} sent only {sent} bytes over its link"
        );
    }
}

/// Starts the virtual cluster's SLURM; returns its SLURM_CONF.
fn slurm_up() -> String {
    let up = run_for(120, Command::new(vc()).arg("slurm-up"));
    assert!(up.status.success(), "slurm-up: {}", text(&up));
    let stdout = String::from_utf8_lossy(&up.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("export SLURM_CONF="))
        .unwrap_or_else(|| panic!("no SLURM_CONF: {}", text(&up)))
        .to_string()
}

/// Scenario 2: the project's sbatch template on 3 SLURM nodes: srun --mpi=pmix with the
/// real trainer, then mpirun inside the job with the simulated one.
fn sbatch_on_three_nodes(work: &Path, data: &Path) {
    let conf = slurm_up();
    let sim = "--trainer simulated --duration 5 --score-interval 1".to_string();
    let real = real_args(data, 20).join(" ");
    for (launcher, args) in [("srun", real), ("mpirun", sim)] {
        let results = work.join(format!("sbatch-{launcher}"));
        std::fs::create_dir_all(&results).unwrap();
        // --time 10: the template asks for SIGTERM 300 s before the limit, so a shorter
        // limit would stop the run at its start. 3 tasks per node: 2 ranks + the primary.
        let out = run_for(
            400,
            aiperf_env(&mut Command::new("sbatch"))
                .env("SLURM_CONF", &conf)
                .current_dir(root())
                .args(["--wait", "--nodes=3", "--ntasks-per-node=3", "--cpus-per-task=1"])
                .args(["--gpus-per-node=0", "--overcommit", "--time=10"])
                .arg(format!("--output={}/job-%j.out", results.display()))
                .arg(format!(
                    "--export=ALL,LAUNCHER={launcher},RANKS_PER_NODE=2,CPU_BIND=none,BIND=none,AIPERF_CONFIG=fashion-mnist,AIPERF_ROOT={},AIPERF_RESULTS={},AIPERF_ARGS={args}",
                    root().display(),
                    results.display()
                ))
                .arg("mpi-launch/aiperf.sbatch"),
        );
        let job_out = std::fs::read_dir(&results)
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().ends_with(".out"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .unwrap_or_default();
        assert!(
            out.status.success(),
            "{launcher}: {}\n{job_out}",
            text(&out)
        );
        let job = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .last()
            .unwrap()
            .to_string();
        assert!(job_out.contains("on node[1-3] via"), "{job_out}");
        assert!(
            job_out.contains(&format!("{launcher}-aiperf: 7 ranks on 3 node(s)")),
            "{job_out}"
        );
        assert!(job_out.contains("score (sustained)"), "{job_out}");
        if launcher == "srun" {
            assert!(
                job_out.contains("bit-identical on all 2 ranks"),
                "{job_out}"
            );
        }
        check_three_node_records(&results.join(format!("job-{job}")), launcher == "srun");
    }
    let down = run_for(60, Command::new(vc()).arg("slurm-down"));
    assert!(down.status.success(), "{}", text(&down));
}

/// Scenario 3: node3 lost mid-run, then `--resume` on the survivors.
fn a_lost_node(work: &Path) {
    let dir = work.join("lost");
    let mut child = aiperf_env(&mut Command::new(vc()))
        .args(["run", "--ranks-per-node", "2", "--results"])
        .arg(&dir)
        .args(["--", "--trainer", "simulated", "--duration", "45"])
        .args(["--score-interval", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let out_reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
    let log = Log::follow(&mut child);
    // Every group has completed epochs on record.
    log.wait_for(Duration::from_secs(120), |l| {
        (0..3).all(|g| l.matches(&format!("group {g} model")).count() >= 2)
    });
    let kill = run_for(60, Command::new(vc()).args(["kill", "node3"]));
    assert!(kill.status.success(), "{}", text(&kill));
    let status = wait_limited(&mut child, Duration::from_secs(120));
    let err = log.finish();
    let _ = out_reader.join();
    assert!(!status.success(), "a run that lost a node exited 0: {err}");
    // OpenMPI names the lost node: its daemon, on node3.
    assert!(
        err.lines()
            .any(|l| l.contains("Remote daemon") && l.contains("node3")),
        "the lost node is not named: {err}"
    );
    wait_released(&dir, Duration::from_secs(60));
    let before = aiperf_records::read_run(&dir).unwrap();
    assert!(
        before.info.end_time_s.is_none(),
        "a crash leaves no end time"
    );
    assert_eq!(before.groups.len(), 3);
    for g in &before.groups {
        assert!(
            !g.epochs.is_empty(),
            "group {}: no epoch on record",
            g.group
        );
    }
    assert!(score(&before, 1.0).unwrap().ops_per_s > 0.0);

    // The surviving layout, 2 nodes as placed before: 5 ranks for a run of 7. Refused,
    // saying why and what it needs.
    let resume = |counts: &str, extra: &[&str]| {
        run_for(
            300,
            aiperf_env(Command::new(vc()).args([
                "run",
                "--nodes",
                "node1,node2",
                "--ranks-per-node",
                counts,
                "--",
                "--resume",
            ]))
            .arg(&dir)
            .args(extra),
        )
    };
    let fewer = resume("2", &[]);
    let t = text(&fewer);
    assert!(!fewer.status.success(), "{t}");
    assert!(
        t.contains("the run had 7 ranks; resume it with the same number (here 5)"),
        "{t}"
    );
    // The same 7 ranks on the survivors (node1: the primary + 2, node2: 4) make unequal
    // nodes: refused, naming --group-size.
    let unequal = resume("2,4", &[]);
    let t = text(&unequal);
    assert!(!unequal.status.success(), "{t}");
    assert!(t.contains("give --group-size"), "{t}");
    // With --group-size 2 the 3 groups come back (node2 holds two of them): resumed.
    let resumed = resume("2,4", &["--group-size", "2"]);
    let t = text(&resumed);
    assert!(resumed.status.success(), "{t}");
    assert!(t.contains("resuming"), "{t}");
    assert!(t.contains("7 ranks on 2 node(s) (node1:3,node2:4"), "{t}");
    let after = aiperf_records::read_run(&dir).unwrap();
    assert_eq!(after.info.resumes.len(), 1);
    assert!(
        after.info.end_time_s.is_some(),
        "the resumed run ended cleanly"
    );
    for (b, a) in before.groups.iter().zip(&after.groups) {
        assert_eq!(
            a.epochs[..b.epochs.len()],
            b.epochs[..],
            "rows before the loss kept"
        );
    }
    assert!(score(&after, 1.0).unwrap().down_time_s > 0.0);
}

#[test]
fn a_virtual_three_node_cluster_trains_schedules_loses_a_node_and_profiles() {
    let missing = missing_prerequisites();
    if !missing.is_empty() {
        // `make test` runs as root with everything installed: there a missing piece is a
        // failure, never a skip.
        assert!(
            std::env::var("AIPERF_REQUIRE_PREREQS").as_deref() != Ok("1"),
            "the virtual-cluster test needs: {}",
            missing.join("; ")
        );
        eprintln!(
            "SKIP: the virtual-cluster test needs: {}",
            missing.join("; ")
        );
        return;
    }
    // Under target/ (a file system every node shares): each node has its own /tmp.
    let work = tempfile::Builder::new()
        .prefix("virtual-cluster.")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let data = work.path().join("quadrants");
    std::fs::create_dir_all(&data).unwrap();
    write_split(&data, "train", TRAIN as usize, 1);
    write_split(&data, "val", VAL as usize, 2);
    let _cluster = Cluster::up(3);
    let started = Instant::now();
    training_across_three_nodes(work.path(), &data);
    eprintln!("training across 3 nodes: {:?}", started.elapsed());
    sbatch_on_three_nodes(work.path(), &data);
    eprintln!("+ sbatch --nodes=3: {:?}", started.elapsed());
    a_lost_node(work.path());
    eprintln!("+ a lost node: {:?}", started.elapsed());
    comm_bench_across_nodes();
    eprintln!("+ comm-bench: {:?}", started.elapsed());
    hierarchical_exchange_across_nodes();
    eprintln!("+ the node-aware exchange: {:?}", started.elapsed());
    weak_scaling_study_as_a_job(work.path());
    eprintln!("+ the weak-scaling study as a job: {:?}", started.elapsed());
}
