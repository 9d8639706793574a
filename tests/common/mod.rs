//! Helpers shared by the integration tests: MPI runs and their records, and the
//! project's Python scripts.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::Path;
use std::process::{Command, Output};

/// The launcher every MPI test goes through: `mpi-launch/mpirun-local` with `np` ranks,
/// running this build's `aiperf`; the caller adds the subcommand and its flags.
pub fn mpirun(np: usize) -> Command {
    mpirun_bin(Path::new(env!("CARGO_BIN_EXE_aiperf")), np)
}

/// [`mpirun`] running the `aiperf` executable at `bin` (a copy the test controls).
pub fn mpirun_bin(bin: &Path, np: usize) -> Command {
    let mut c = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local"));
    c.env("AIPERF_BIN", bin).arg(np.to_string());
    c
}

/// `cmd` under coreutils' `timeout`, killed after `seconds`: a job that used to hang fails
/// the test instead of hanging the suite (a bound far above the time the work takes).
pub fn bounded(seconds: u32, cmd: &Command) -> Command {
    let mut c = Command::new("timeout");
    c.arg(seconds.to_string())
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// A finished command's standard output, then its standard error, as text.
pub fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// World ranks of `aiperf run` writing to `dir` (their command lines name it).
pub fn rank_pids(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<String> = cmd
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let is_rank = args.first()?.ends_with("/aiperf") && args.iter().any(|a| a == &needle);
            is_rank.then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

/// HDF5 opens files without close-on-exec: a child forked while another thread has a
/// record file open inherits the descriptor and its lock (a long-running mpirun then keeps
/// the file "locked"). The tests of one binary therefore read records and start processes
/// one at a time.
fn hdf5_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`aiperf_records::read_run`], one thread at a time.
pub fn read_run(dir: &Path) -> Result<aiperf_records::Run, aiperf_records::RecordError> {
    let _turn = hdf5_turn();
    aiperf_records::read_run(dir)
}

/// A run's records with every model's architecture and each trial's batch size by model id
/// (a trial cut by the deadline has none), read one thread at a time.
pub fn read_with_architectures(
    dir: &Path,
) -> (
    aiperf_records::Run,
    std::collections::HashMap<u64, aiperf::arch::Graph>,
    std::collections::HashMap<u64, u32>,
) {
    let run = read_run(dir).unwrap();
    let archs = {
        let _turn = hdf5_turn();
        aiperf_records::read_architectures(dir).unwrap()
    };
    let archs = archs
        .into_iter()
        .map(|(id, json)| (id, aiperf::arch::Graph::from_json(&json).unwrap()))
        .collect();
    let batch_of = run
        .trials
        .iter()
        .map(|t| (t.model_id, t.batch_size))
        .collect();
    (run, archs, batch_of)
}

/// Runs `python3 scripts/SCRIPT ARGS…` (SCRIPT with its folder, e.g. `tools/scaling-model`)
/// in the repository root and returns its standard
/// output; the test fails, with both outputs, if it fails.
pub fn python_script(script: &str, args: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("python3")
        .arg(root.join("scripts").join(script))
        .args(args)
        .current_dir(root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Starts `cmd` (stdout and stderr piped) while no record file is open in this process.
pub fn spawn(cmd: &mut std::process::Command) -> std::process::Child {
    let _turn = hdf5_turn();
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `cmd` to completion (see [`spawn`]) and returns its output.
pub fn output(cmd: &mut std::process::Command) -> std::process::Output {
    spawn(cmd).wait_with_output().unwrap()
}

/// Waits until no process holds a file under `dir` open: a killed process drops its
/// command line before its files, so [`rank_pids`] can be empty while a dying rank still
/// holds a record file (and its lock).
pub fn wait_released(dir: &Path, limit: std::time::Duration) {
    let started = std::time::Instant::now();
    let held = || {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read_dir(e.path().join("fd")).ok())
            .flatten()
            .filter_map(|fd| fd.ok().and_then(|fd| std::fs::read_link(fd.path()).ok()))
            .any(|target| target.starts_with(dir))
    };
    while held() {
        assert!(started.elapsed() < limit, "{} stays open", dir.display());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// SIGKILLs the second rank of the 3-rank job `child` writing into `dir` (`log` its
/// stderr): mpirun takes the others down, nothing closes cleanly; returns once the job has
/// exited and no process holds a file of `dir`.
pub fn kill_a_rank(dir: &Path, child: &mut std::process::Child, log: StderrLog) {
    let pids = rank_pids(dir);
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert!(
        output(std::process::Command::new("kill").args(["-KILL", &pids[1]]))
            .status
            .success()
    );
    assert!(!child.wait().unwrap().success());
    log.finish();
    wait_released(dir, std::time::Duration::from_secs(60));
}

/// A child's stderr, collected line by line on a thread while the test watches it.
pub struct StderrLog {
    text: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl StderrLog {
    /// Starts collecting `child`'s (piped) stderr.
    pub fn follow(child: &mut std::process::Child) -> StderrLog {
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr piped");
        let sink = std::sync::Arc::clone(&text);
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let mut t = sink.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        });
        StderrLog { text, reader }
    }

    /// Waits until `done` holds for the text so far, at most `limit`.
    pub fn wait_for(&self, limit: std::time::Duration, done: impl Fn(&str) -> bool) {
        let started = std::time::Instant::now();
        while !done(&self.text.lock().unwrap()) {
            assert!(
                started.elapsed() < limit,
                "not in the log in time: {}",
                self.text.lock().unwrap()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// The whole log, once the child has exited.
    pub fn finish(self) -> String {
        self.reader.join().unwrap();
        std::sync::Arc::try_unwrap(self.text)
            .map(|m| m.into_inner().unwrap())
            .unwrap_or_else(|t| t.lock().unwrap().clone())
    }
}

pub const SIDE: u32 = 8;
pub const CLASSES: u32 = 4;

/// `n` 1×8×8 images: noise, plus a bright 4×4 quadrant numbered by the class; every tenth
/// sample carries the next class's label, so accuracy stays below 1 (the score's −ln error
/// stays finite).
pub fn write_split(dir: &Path, split: &str, n: usize, seed: u64) {
    write_noisy_split(dir, split, n, seed, 10);
}

/// [`write_split`] with every `wrong`-th sample carrying the next class's label (accuracy
/// stays below 1 − 1/`wrong`).
pub fn write_noisy_split(dir: &Path, split: &str, n: usize, seed: u64, wrong: usize) {
    let path = dir.join(format!("{split}.aipk"));
    let mut w =
        aiperf_data_prep::PackWriter::create(&path, split, [1, SIDE, SIDE], CLASSES).unwrap();
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..n {
        let class = (i % CLASSES as usize) as u32;
        let (qy, qx) = (class / 2 * 4, class % 2 * 4);
        let img: Vec<u8> = (0..SIDE * SIDE)
            .map(|p| {
                let (y, x) = (p / SIDE, p % SIDE);
                let noise = (next() % 90) as u8;
                let lit = (qy..qy + 4).contains(&y) && (qx..qx + 4).contains(&x);
                if lit {
                    noise + 140
                } else {
                    noise
                }
            })
            .collect();
        let label = if i % wrong == wrong - 1 {
            (class + 1) % CLASSES
        } else {
            class
        };
        w.push(&img, label, &path).unwrap();
    }
    finish_quadrants(w);
}

/// Closes a pack of the quadrant classes.
pub fn finish_quadrants(w: aiperf_data_prep::PackWriter) {
    let names = (0..CLASSES).map(|c| format!("quadrant{c}")).collect();
    let src = aiperf_data_prep::Source {
        kind: "test".into(),
        dataset: "quadrants".into(),
        inputs: vec![],
        processing: String::new(),
        subset: Some(false),
    };
    w.finish(names, src, 0).unwrap();
}

/// The quadrant task in `tmp/quadrants`: `train` training images and 48 validation images.
pub fn quadrants(tmp: &Path, train: usize) -> std::path::PathBuf {
    let data = tmp.join("quadrants");
    std::fs::create_dir_all(&data).unwrap();
    write_split(&data, "train", train, 1);
    write_split(&data, "val", 48, 2);
    data
}

/// Runs `aiperf run` (real trainer, 3 ranks) expecting it to fail; returns its stderr.
pub fn run_failing(data: &Path, results: &Path, extra: &[&str]) -> String {
    let out = output(
        mpirun(3)
            .args(["run", "--trainer", "real", "--threads", "1", "--data"])
            .arg(data)
            .arg("--results")
            .arg(results)
            .args(extra),
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    err
}
