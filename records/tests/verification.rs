//! Verification asked for is verification done: `--audit-digest` on a folder without an
//! audit (none, or a link to nothing) fails naming the file, and a malformed digest is
//! refused naming the digest that flag wants.

mod common;

use std::path::Path;
use std::process::Command;

use common::official_run;

/// `aiperf-score DIR ARGS`: (exit status, stdout + stderr).
fn score(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf-score"))
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text.into_owned())
}

#[test]
fn regression_an_audit_digest_on_a_folder_without_an_audit_fails_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let hex = aiperf_records::digest::hex(&official_run(tmp.path(), 3));
    let some_audit = "cd".repeat(32);
    // Without the flag, no audit is no audit: VALID.
    assert_eq!(score(tmp.path(), &["--digest", &hex]).0, Some(0));
    let (code, text) = score(
        tmp.path(),
        &["--digest", &hex, "--audit-digest", &some_audit],
    );
    assert_eq!(code, Some(6), "{text}");
    assert!(
        text.contains(&format!(
            "{} is missing",
            tmp.path().join("audit.h5").display()
        )),
        "{text}"
    );
    assert!(text.contains("NOT TRUSTED"), "{text}");
    // A deleted audit left as a link to nothing is no audit either, and said so.
    std::os::unix::fs::symlink(tmp.path().join("gone.h5"), tmp.path().join("audit.h5")).unwrap();
    let (code, text) = score(tmp.path(), &["--audit-digest", &some_audit]);
    assert_eq!(code, Some(6), "{text}");
    assert!(text.contains("gone.h5, which does not exist"), "{text}");
    // JSON says the same.
    let (code, text) = score(tmp.path(), &["--json", "--audit-digest", &some_audit]);
    assert_eq!(code, Some(6), "{text}");
    assert!(text.contains("\"verdict\": \"NOT TRUSTED\""), "{text}");
}

#[test]
fn regression_a_malformed_digest_is_refused_naming_the_digest_its_flag_wants() {
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 3);
    for bad in ["", "abc", &"z".repeat(64), &"ab".repeat(33)] {
        let (code, text) = score(tmp.path(), &["--audit-digest", bad]);
        assert_eq!(code, Some(1), "{text}");
        assert!(
            text.contains("--audit-digest")
                && text.contains("the \"audit digest\" that `aiperf audit` printed"),
            "{bad:?}: {text}"
        );
        assert!(!text.contains("run digest"), "{bad:?}: {text}");
        let (code, text) = score(tmp.path(), &["--digest", bad]);
        assert_eq!(code, Some(1), "{text}");
        assert!(
            text.contains("--digest")
                && text.contains("the \"run digest\" in rank 0's closing log line"),
            "{bad:?}: {text}"
        );
    }
}
