//! Nothing lost when the disk fills, under a real `mpirun`: a run whose results
//! filesystem fills up (a small tmpfs) or whose ranks meet a file-size limit (`ulimit -f`)
//! stops with an error naming the file while every record is whole, and once there is room
//! again `aiperf run --resume` finishes it into sealed records that score intact.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{mpirun, mpirun_bin, output, spawn, text, wait_released, StderrLog};

/// `aiperf run --trainer simulated` on 3 ranks into `dir` through the binary `bin`.
fn simulated(bin: &Path, dir: &Path, duration: &str) -> Command {
    let mut c = mpirun_bin(bin, 3);
    c.args(["run", "--trainer", "simulated", "--group-size", "1"])
        .args(["--duration", duration, "--results"])
        .arg(dir);
    c
}

/// Resumes the run in `dir` (no limit, room again) and checks that it ends at its
/// deadline, sealed, and that its records score intact (INVALID: a simulated run).
fn resumed_scores_intact(dir: &Path) {
    wait_released(dir, Duration::from_secs(60));
    let out = output(mpirun(3).args(["run", "--resume"]).arg(dir));
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("run digest"), "{}", text(&out));
    let score = output(
        Command::new(env!("CARGO_BIN_EXE_aiperf"))
            .arg("score")
            .arg(dir),
    );
    let s = text(&score);
    assert_eq!(score.status.code(), Some(4), "{s}");
    assert!(
        s.contains("records                  intact (run digest"),
        "{s}"
    );
    assert!(s.contains("resumed                  1 time(s)"), "{s}");
}

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: PathBuf, size: &str) -> Tmpfs {
        std::fs::create_dir_all(&at).unwrap();
        let out = output(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(&at),
        );
        assert!(
            out.status.success(),
            "this test mounts a small tmpfs and needs root (make test runs as root): {}",
            text(&out)
        );
        Tmpfs(at)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn regression_a_run_on_a_filesystem_that_fills_stops_whole_and_its_resume_scores_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(tmp.path().join("small"), "16m");
    let dir = fs.0.join("r");
    let mut child = spawn(
        simulated(Path::new(env!("CARGO_BIN_EXE_aiperf")), &dir, "60")
            .stderr(std::process::Stdio::piped()),
    );
    let log = StderrLog::follow(&mut child);
    log.wait_for(Duration::from_secs(120), |l| {
        l.matches(" epoch ").count() >= 6
    });
    // Another program fills the filesystem while the run writes there.
    let mut filler = std::fs::File::create(fs.0.join("filler")).unwrap();
    let block = vec![0u8; 1 << 16];
    while std::io::Write::write_all(&mut filler, &block).is_ok() {}
    drop(filler);
    let status = child.wait().unwrap();
    let stopped = log.finish();
    assert!(!status.success(), "{stopped}");
    assert!(
        stopped.contains(
            "bytes free, under the 2097152 aiperf keeps so that every record is written whole"
        ),
        "{stopped}"
    );
    assert!(
        stopped.contains(&format!("aiperf run --resume {}", dir.display())),
        "{stopped}"
    );
    // Room again: the resume finishes the run, and the records are whole.
    std::fs::remove_file(fs.0.join("filler")).unwrap();
    resumed_scores_intact(&dir);
}

#[test]
fn regression_a_rank_at_its_file_size_limit_stops_naming_the_file_and_its_resume_scores_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    // The limit on the ranks only (mpirun's own shared memory would pass it at start-up):
    // 2.75 MiB, which primary.h5 nears within the run.
    let limited = tmp.path().join("limited-aiperf");
    std::fs::write(
        &limited,
        format!(
            "#!/bin/bash\nulimit -f 2816\nexec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_aiperf")
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &limited,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = output(&mut simulated(&limited, &dir, "60"));
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    // Not killed by SIGXFSZ: stopped by aiperf, naming the file and the limit.
    assert!(
        t.contains(&format!("{}: ", dir.join("primary.h5").display()))
            && t.contains("near the file-size limit of 2883584 bytes (ulimit -f)"),
        "{t}"
    );
    assert!(!t.contains("File size limit exceeded"), "{t}");
    resumed_scores_intact(&dir);
}
