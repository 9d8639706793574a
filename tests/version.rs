//! `aiperf --version` names what a submitted result must name: the version, the commit it was
//! built from (marked when the sources differed), and the libtorch, MPI and HDF5 libraries it
//! runs with, and the platform fingerprint a run records; `-V` is the one-line form.

use std::process::Command;

fn aiperf(arg: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .arg(arg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The commit of this checkout and whether the binary's sources differ from it, from git.
fn checkout_commit() -> Option<(String, bool)> {
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short=12", "HEAD"])?;
    // The build inputs (records/build.rs): docs and tests do not change the binary.
    let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
    status.extend(aiperf_records::version::BUILD_INPUTS.split(' '));
    let modified = !git(&status)?.is_empty();
    Some((head, modified))
}

#[test]
fn version_names_the_commit_and_the_libraries() {
    let text = aiperf("--version");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!("aiperf {}", env!("CARGO_PKG_VERSION")),
        "{text}"
    );
    let commit = lines[1].strip_prefix("commit ").expect(&text);
    match checkout_commit() {
        Some((head, modified)) => {
            let expected = if modified {
                format!("{head}+modified")
            } else {
                head
            };
            assert_eq!(commit, expected, "{text}");
        }
        None => assert_eq!(commit, "unknown", "{text}"),
    }
    let libtorch = lines[2].strip_prefix("libtorch ").expect(&text);
    assert!(
        libtorch.starts_with("2.13.0 ("),
        "tch 0.26 binds libtorch 2.13.0: {text}"
    );
    assert!(
        libtorch.contains(aiperf::platform::LIBTORCH_LIB) || libtorch.contains("/lib;"),
        "{text}"
    );
    let mpi = lines[3].strip_prefix("MPI ").expect(&text);
    assert!(
        mpi.starts_with("Open MPI v") || mpi.starts_with("MPICH"),
        "{text}"
    );
    assert!(lines[4].starts_with("HDF5 1."), "{text}");
    assert!(lines[5].starts_with("platform "), "{text}");
    // The fingerprint a run records, with the kernel pins of the environment in it.
    let run = |pin: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_aiperf"));
        c.arg("--version").env_remove("ATEN_CPU_CAPABILITY");
        if let Some(p) = pin {
            c.env("ATEN_CPU_CAPABILITY", p);
        }
        let out = String::from_utf8(c.output().unwrap().stdout).unwrap();
        let json = out
            .lines()
            .find_map(|l| l.strip_prefix("fingerprint "))
            .expect(&out)
            .to_string();
        serde_json::from_str::<aiperf_records::platform::Fingerprint>(&json).unwrap()
    };
    let native = run(None);
    let pinned = run(Some("default"));
    assert!(
        !native.pins.contains_key("ATEN_CPU_CAPABILITY"),
        "{native:?}"
    );
    assert_eq!(pinned.pins["ATEN_CPU_CAPABILITY"], "default");
    assert_eq!(
        pinned.aten_capability, "DEFAULT",
        "libtorch reports the pinned level"
    );
    assert_ne!(native, pinned);
}

#[test]
fn short_version_is_one_line_with_the_commit() {
    let text = aiperf("-V");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with(&format!("aiperf {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
}
