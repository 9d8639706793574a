//! `aiperf-score`'s outputs (`--csv`, `--trace`, `--report`) never destroy the records it
//! reads: a path naming a record (directly, through a symbolic link, as a hard link, or as a
//! `*.h5` name in a run folder) is refused before anything is written, exit status 1, the
//! records byte-identical; and outputs appear whole under their names, or not at all.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use aiperf_records::outputs::{self, Staged};
use common::{serial, small_run, write_run};

/// Every file under `dir` (recursively) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            files.extend(snapshot(&path));
        } else if meta.is_file() {
            files.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    files
}

/// Runs `aiperf-score` with `args` (paths as given).
fn score(args: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aiperf-score"))
        .args(args)
        .output()
        .unwrap()
}

/// The run refused: exit status 1, nothing on stdout (nothing was scored or printed), and
/// this error.
fn assert_refused(out: &Output, message: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(stderr.trim_end(), format!("aiperf-score: error: {message}"));
}

/// A two-group run (scored INVALID, exit 4) in `tmp/run`.
fn run_in(tmp: &Path) -> PathBuf {
    let run = tmp.join("run");
    std::fs::create_dir(&run).unwrap();
    write_run(&run, Some(1000.0));
    run
}

#[test]
fn regression_csv_naming_primary_h5_is_refused_and_the_records_stay_intact() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let run = run_in(tmp.path());
    let before = snapshot(&run);
    let primary = run.join("primary.h5");
    let out = score(&[&run, Path::new("--csv"), &primary]);
    let (p, r) = (primary.display(), run.display());
    assert_refused(
        &out,
        &format!("--csv {p}: refused: the file is {p}, a record of the run in {r}: writing it would destroy the record; nothing was written, give another file"),
    );
    assert_eq!(snapshot(&run), before);
    // The same file by another spelling (relative, through `..`), from inside the run.
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf-score"))
        .current_dir(&run)
        .args([".", "--csv", "../run/primary.h5"])
        .output()
        .unwrap();
    assert_refused(
        &out,
        "--csv ../run/primary.h5: refused: the file is ./primary.h5, a record of the run in .: writing it would destroy the record; nothing was written, give another file",
    );
    assert_eq!(snapshot(&run), before);
}

#[test]
fn regression_trace_naming_group_0_h5_is_refused_and_the_records_stay_intact() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    small_run(tmp.path(), 4); // records traced spans: --trace would have written them
    let before = snapshot(tmp.path());
    let group = tmp.path().join("group-0.h5");
    let out = score(&[tmp.path(), Path::new("--trace"), &group]);
    let (g, r) = (group.display(), tmp.path().display());
    assert_refused(
        &out,
        &format!("--trace {g}: refused: the file is {g}, a record of the run in {r}: writing it would destroy the record; nothing was written, give another file"),
    );
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn regression_csv_through_a_symbolic_link_to_a_record_is_refused() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let run = run_in(tmp.path());
    let link = tmp.path().join("timeline.csv");
    std::os::unix::fs::symlink(run.join("group-1.h5"), &link).unwrap();
    let before = snapshot(&run);
    let out = score(&[&run, Path::new("--csv"), &link]);
    assert_refused(
        &out,
        &format!("--csv {}: refused: the file is {} (through a symbolic link), a record of the run in {}: writing it would destroy the record; nothing was written, give another file", link.display(), run.join("group-1.h5").display(), run.display()),
    );
    assert_eq!(snapshot(&run), before);
}

#[test]
fn regression_trace_to_a_hard_link_of_a_record_is_refused() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let run = run_in(tmp.path());
    let copy = tmp.path().join("trace.json");
    std::fs::hard_link(run.join("primary.h5"), &copy).unwrap();
    let before = snapshot(&run);
    let out = score(&[&run, Path::new("--trace"), &copy]);
    assert_refused(
        &out,
        &format!("--trace {}: refused: the file is {} (a hard link to it), a record of the run in {}: writing it would destroy the record; nothing was written, give another file", copy.display(), run.join("primary.h5").display(), run.display()),
    );
    assert_eq!(snapshot(&run), before);
}

#[test]
fn regression_trace_naming_a_new_audit_h5_in_the_run_folder_is_refused() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let run = run_in(tmp.path());
    let before = snapshot(&run);
    let audit = run.join("audit.h5"); // not there yet: the trace would pose as the audit
    let out = score(&[&run, Path::new("--trace"), &audit]);
    let (a, r) = (audit.display(), run.display());
    assert_refused(
        &out,
        &format!("--trace {a}: refused: the file would be {a}, a record's name in the run folder {r} (every *.h5 file in a run folder is a record: primary.h5, group-<g>.h5, audit.h5): writing it would pose as a record; nothing was written, give another file"),
    );
    assert_eq!(snapshot(&run), before);
}

#[test]
fn regression_report_into_a_run_folder_where_a_report_file_is_a_link_to_a_record_is_refused() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let run = run_in(tmp.path());
    std::os::unix::fs::symlink("primary.h5", run.join("index.html")).unwrap();
    let before = snapshot(&run);
    let out = score(&[&run, Path::new("--report"), &run]);
    let r = run.display();
    assert_refused(
        &out,
        &format!("--report {r}: refused: {r}/index.html is {r}/primary.h5 (through a symbolic link), a record of the run in {r}: writing it would destroy the record; nothing was written, give another folder"),
    );
    assert_eq!(snapshot(&run), before);
    // A plot's name hard-linked to a record.
    std::fs::remove_file(run.join("index.html")).unwrap();
    std::fs::hard_link(run.join("group-1.h5"), run.join("ops.png")).unwrap();
    let before = snapshot(&run);
    let out = score(&[&run, Path::new("--report"), &run]);
    assert_refused(
        &out,
        &format!("--report {r}: refused: {r}/ops.png is {r}/group-1.h5 (a hard link to it), a record of the run in {r}: writing it would destroy the record; nothing was written, give another folder"),
    );
    assert_eq!(snapshot(&run), before);
}

#[test]
fn regression_report_folder_naming_a_record_is_refused() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let run = run_in(tmp.path());
    let before = snapshot(&run);
    let primary = run.join("primary.h5");
    let out = score(&[&run, Path::new("--report"), &primary]);
    let (p, r) = (primary.display(), run.display());
    assert_refused(
        &out,
        &format!("--report {p}: refused: the folder is {p}, a record of the run in {r}: writing it would destroy the record; nothing was written, give another folder"),
    );
    assert_eq!(snapshot(&run), before);
}

#[test]
fn regression_scaling_plot_linked_to_a_record_of_the_second_run_is_refused() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for dir in [&a, &b] {
        std::fs::create_dir(dir).unwrap();
        write_run(dir, Some(1000.0));
    }
    let report = tmp.path().join("report");
    std::fs::create_dir(&report).unwrap();
    std::os::unix::fs::symlink(b.join("group-0.h5"), report.join("scaling.svg")).unwrap();
    let before = snapshot(tmp.path());
    let out = score(&[
        &a,
        &b,
        Path::new("--scaling"),
        Path::new("--report"),
        &report,
    ]);
    assert_refused(
        &out,
        &format!("--report {}: refused: {} is {} (through a symbolic link), a record of the run in {}: writing it would destroy the record; nothing was written, give another folder", report.display(), report.join("scaling.svg").display(), b.join("group-0.h5").display(), b.display()),
    );
    assert_eq!(snapshot(tmp.path()), before);
}

/// Documented in `cli::check_outputs`: a report's files are never `*.h5` names, so a run
/// folder may receive its own report; the records stay as they were and still score.
#[test]
fn a_report_into_the_run_folder_itself_is_allowed_and_leaves_the_records_intact() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let run = run_in(tmp.path());
    let before = snapshot(&run);
    let out = score(&[&run, Path::new("--report"), &run]);
    assert_eq!(
        out.status.code(),
        Some(4), // scored, INVALID
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = snapshot(&run);
    assert!(after.contains_key(&run.join("index.html")));
    for (path, bytes) in &before {
        assert_eq!(after.get(path), Some(bytes), "{}", path.display());
    }
    let names: Vec<String> = after
        .keys()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains(".tmp-")), "{names:?}");
    assert_eq!(score(&[&run]).status.code(), Some(4));
}

#[test]
fn a_failed_write_leaves_no_half_file_and_no_temporary_file() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let run = run_in(tmp.path());
    // The target is a folder: the rename fails, the temporary file is removed.
    let target = tmp.path().join("t.csv");
    std::fs::create_dir(&target).unwrap();
    let before = snapshot(tmp.path());
    let out = score(&[&run, Path::new("--csv"), &target]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("writing {}", target.display())),
        "{stderr}"
    );
    assert_eq!(snapshot(tmp.path()), before);
    let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(names.len(), 2, "{names:?}"); // run/ and t.csv/ alone
}

#[test]
fn a_staged_file_replaces_only_its_own_name() {
    let tmp = tempfile::tempdir().unwrap();
    let (target, other) = (tmp.path().join("out.csv"), tmp.path().join("other"));
    std::fs::write(&target, "old").unwrap();
    std::fs::hard_link(&target, &other).unwrap();
    outputs::write_atomic(&target, b"new").unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"new");
    assert_eq!(std::fs::read(&other).unwrap(), b"old"); // the other link keeps its bytes
                                                        // Dropped before commit: nothing under the name, no temporary file left.
    let (staged, _) = Staged::new(&tmp.path().join("half.png")).unwrap();
    assert!(staged.path().extension().is_some_and(|e| e == "png"));
    assert_eq!(staged.path().parent(), Some(tmp.path()));
    drop(staged);
    let mut names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["other", "out.csv"]);
}

#[test]
fn commit_new_never_replaces_a_file_that_appeared_meanwhile() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("audit.h5");
    let (staged, _) = Staged::new(&target).unwrap();
    std::fs::write(staged.path(), "audit").unwrap();
    std::fs::write(&target, "first").unwrap();
    let err = staged.commit_new().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
    assert_eq!(std::fs::read(&target).unwrap(), b"first");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
}
