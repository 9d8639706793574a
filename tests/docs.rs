//! Every Markdown page of the repository stays true to the code: every command it shows (in
//! `sh` blocks and inline code) names a real make target and script and parses with the real
//! clap definitions of `aiperf`, `aiperf-score` and `aiperf-data-prep`; every relative link
//! and anchor resolves; every repository path it names exists; the offline commands among
//! them run on the committed record set; and the README's score table and picture are what
//! the current code prints and draws.

#[path = "common/markdown.rs"]
mod markdown;

use std::path::Path;
use std::process::Command;

use markdown::{check, check_link, commands, make_targets, named_paths, pages, root, Program};

#[test]
fn every_markdown_file_of_the_repository_is_read() {
    let names: Vec<String> = pages().into_iter().map(|p| p.name).collect();
    for expected in [
        "README.md",
        "docs/centre.md",
        "docs/design.md",
        "docs/reviewer.md",
        "docs/scaling.md",
        "docs/performance.md",
        "docs/primary-measurements.md",
        "results/README.md",
        "mpi-launch/README.md",
        "data-prep/README.md",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not read: {names:?}"
        );
    }
}

#[test]
fn every_command_in_the_pages_names_real_targets_files_and_flags() {
    let targets = make_targets();
    assert!(targets.iter().any(|t| t == "test"), "{targets:?}");
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for cmd in commands(&page.text) {
            checked += 1;
            if let Some(p) = check(&cmd, &targets, &page.dir()) {
                problems.push(format!("{}: `{cmd}`: {p}", page.name));
            }
        }
    }
    assert!(checked > 100, "only {checked} commands found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_command_check_refuses_wrong_commands() {
    let targets = make_targets();
    let dir = root();
    for bad in [
        "make no-such-target",
        "scripts/no-such-script",
        "scripts/no-such-*",
        "mpi-launch/mpirun-local 3 run --no-such-flag",
        "target/release/aiperf-score results/x --no-such-flag",
        "aiperf-score --no-such-flag results/x",
        "mpirun -np 5 aiperf comm-bench --bogus",
        "srun aiperf run --bogus",
        "aiperf-data-prep imagenet --src x --out y --no-such-flag",
        "aiperf-data-prep no-such-format --out y",
        "aiperf run --precision tf32",
        "aiperf dp-check --staging host",
    ] {
        assert!(check(bad, &targets, &dir).is_some(), "{bad}");
    }
    for good in [
        "VC=0 make bench-comm",
        "aiperf --version",
        "aiperf-score --version",
        "aiperf audit",
        "aiperf run --help",
        "aiperf-data-prep fashion-mnist --src /usr/share/datasets/fashion-mnist --out data/fashion-mnist",
        "mpirun --map-by ppr:2:node aiperf run --config imagenet",
    ] {
        assert_eq!(check(good, &targets, &dir), None, "{good}");
    }
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for target in markdown::links(&page.text) {
            checked += 1;
            if let Some(p) = check_link(&page, &target) {
                problems.push(format!("{}: {p}", page.name));
            }
        }
    }
    assert!(checked > 20, "only {checked} links found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_link_check_refuses_missing_files_and_anchors() {
    let page = markdown::Page {
        name: "docs/centre.md".into(),
        text: String::new(),
    };
    assert!(check_link(&page, "no-such-page.md").is_some());
    assert!(check_link(&page, "reviewer.md#no-such-heading").is_some());
    assert!(check_link(&page, "../README.md").is_none());
    assert_eq!(
        markdown::anchor("Choosing libtorch (clusters, GPUs)"),
        "choosing-libtorch-clusters-gpus"
    );
}

#[test]
fn every_repository_path_the_pages_name_exists() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for path in named_paths(&page.text) {
            checked += 1;
            if !markdown::exists(&path, &page.dir()) {
                problems.push(format!("{}: `{path}` does not exist", page.name));
            }
        }
    }
    assert!(checked > 30, "only {checked} paths found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The offline commands the pages show (`aiperf ops` on a built-in architecture, `aiperf
/// score`/`aiperf-score` on a committed record set) run, and succeed or give a verdict.
#[test]
fn the_offline_commands_in_the_pages_run() {
    let mut ran = 0;
    for page in pages() {
        for cmd in markdown::sh_commands(&page.text) {
            let args = match markdown::program(&markdown::words(&cmd)) {
                Some(Program::Aiperf(a)) => a,
                Some(Program::Score(a)) => [vec!["score".to_string()], a].concat(),
                _ => continue,
            };
            let runnable = match args.first().map(String::as_str) {
                Some("ops") => !args.iter().any(|a| a.ends_with(".json")),
                Some("score") => {
                    args.len() == 2
                        && Path::new(&root().join(&args[1]))
                            .join("primary.h5")
                            .is_file()
                }
                _ => false,
            };
            if !runnable {
                continue;
            }
            let out = Command::new(env!("CARGO_BIN_EXE_aiperf"))
                .args(&args)
                .current_dir(root())
                .output()
                .unwrap();
            let code = out.status.code();
            assert!(
                matches!(code, Some(0 | 3 | 4)),
                "{}: `{cmd}` exited {code:?}: {}",
                page.name,
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 2, "only {ran} offline commands ran");
}

/// The lines of the README's first `text` block (the score table it shows).
fn readme_score_table() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let block = readme
        .split("```text\n")
        .nth(1)
        .expect("README.md shows the score table in a ```text block")
        .split("```")
        .next()
        .unwrap();
    block.lines().map(str::to_string).collect()
}

#[test]
fn the_readmes_score_table_is_what_the_scorer_prints_for_the_committed_run() {
    let table = readme_score_table();
    let run = table[0]
        .strip_prefix("aiperf score: ")
        .expect("the table starts with its run folder")
        .to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .args(["score", &run])
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "the committed make-run set is INVALID (too short)"
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    // A trimmed copy: every line shown is printed, in the same order.
    let mut at = 0;
    for line in &table {
        match lines[at..].iter().position(|l| l == line) {
            Some(i) => at += i + 1,
            None => panic!("README.md shows `{line}`, which `aiperf score {run}` does not print in that order:\n{printed}"),
        }
    }
    assert!(
        table.len() >= 8,
        "the README's table is only {} lines",
        table.len()
    );
}

#[test]
fn the_readmes_picture_is_what_the_current_code_draws() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.contains("](docs/img/score-ops.svg)"),
        "the README shows docs/img/score-ops.svg"
    );
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .args(["score", "results/run-1796354114", "--report"])
        .arg(out.path())
        .current_dir(root())
        .output()
        .unwrap()
        .status;
    assert_eq!(status.code(), Some(4));
    let drawn = std::fs::read(out.path().join("ops.svg")).unwrap();
    let committed = std::fs::read(root().join("docs/img/score-ops.svg")).unwrap();
    assert!(
        drawn == committed,
        "docs/img/score-ops.svg is not what the current code draws: run `make docs-figures`"
    );
}
