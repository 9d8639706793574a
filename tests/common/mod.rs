//! Helpers shared by the MPI integration tests.

use std::path::Path;

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

/// [`aiperf_records::read_architectures`], one thread at a time.
#[allow(dead_code)] // not every test binary reads architectures
pub fn read_architectures(dir: &Path) -> Result<Vec<(u64, String)>, aiperf_records::RecordError> {
    let _turn = hdf5_turn();
    aiperf_records::read_architectures(dir)
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
