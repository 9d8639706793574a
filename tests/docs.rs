//! The pages people follow (README.md and docs/*.md) stay true (issue 23): every command in
//! their `sh` blocks, and every `make …`, `scripts/…` and `mpi-launch/…` they quote, names a
//! real make target, file and `aiperf` flags (parsed by the same clap definition the binary
//! uses); the offline commands among them (`ops`, `score`) are run, on the committed record
//! sets, and must succeed.

use std::path::{Path, PathBuf};
use std::process::Command;

use aiperf::cli::Cli;
use clap::Parser;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page under docs/, with their text.
fn pages() -> Vec<(String, String)> {
    let mut files = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 4, "docs/ holds the readers' pages: {docs:?}");
    files.extend(docs);
    files
        .into_iter()
        .map(|f| {
            let name = f.strip_prefix(root()).unwrap().display().to_string();
            (name, std::fs::read_to_string(&f).unwrap())
        })
        .collect()
}

/// The command lines of a page's `sh` blocks, comments and continuation-free.
fn sh_commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            inside = !inside && (lang == "sh" || lang == "bash");
            continue;
        }
        if inside {
            let cmd = t.split(" #").next().unwrap().trim();
            if !cmd.is_empty() && !cmd.starts_with('#') {
                out.push(cmd.to_string());
            }
        }
    }
    out
}

/// Inline code spans that are commands or repository paths.
fn quoted(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.starts_with("make ") || s.starts_with("scripts/") || s.starts_with("mpi-launch/")
        })
        .map(str::to_string)
        .collect()
}

fn make_targets() -> Vec<String> {
    let makefile = std::fs::read_to_string(root().join("Makefile")).unwrap();
    makefile
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(t, _)| !t.starts_with(['\t', '#', '.']) && !t.contains(['=', ' ', '$']))
        .map(|(t, _)| t.to_string())
        .collect()
}

/// Words of a command line, without leading `VAR=value` assignments, up to the first
/// redirection or pipe; a placeholder `<…>` stands for a value (1), an ellipsis for nothing.
fn words(cmd: &str) -> Vec<String> {
    let mut text = String::new();
    let mut rest = cmd;
    while let Some((before, after)) = rest.split_once('<') {
        text.push_str(before);
        match after.split_once('>') {
            Some((_, tail)) => {
                text.push('1');
                rest = tail;
            }
            None => {
                text.push('<');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.split_whitespace()
        .skip_while(|w| w.contains('=') && !w.starts_with('-'))
        .take_while(|w| !matches!(*w, ">" | "|" | "&&" | ";" | "2>&1"))
        .filter(|w| *w != "…")
        .map(str::to_string)
        .collect()
}

/// Whether a repository path exists; `dir/prefix*` matches a file starting with `prefix`.
fn exists(path: &str) -> bool {
    match path.split_once('*') {
        None => root().join(path).exists(),
        Some((stem, _)) => {
            let (dir, prefix) = stem.rsplit_once('/').unwrap_or((".", stem));
            std::fs::read_dir(root().join(dir)).is_ok_and(|mut d| {
                d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with(prefix)))
            })
        }
    }
}

/// The `aiperf` arguments of a command that runs aiperf (directly or under a launcher).
fn aiperf_args(w: &[String]) -> Option<Vec<String>> {
    let first = w.first()?.as_str();
    let rest = |n: usize| w[n..].to_vec();
    match first {
        "aiperf" | "target/release/aiperf" => Some(rest(1)),
        "aiperf-score" | "target/release/aiperf-score" => {
            Some([vec!["score".to_string()], rest(1)].concat())
        }
        "mpi-launch/mpirun-local" => Some(rest(2)),
        "mpi-launch/srun-aiperf" | "mpi-launch/mpirun-aiperf" => Some(rest(1)),
        "mpirun" => {
            let at = w
                .iter()
                .position(|x| x == "aiperf" || x.ends_with("/aiperf"))?;
            Some(rest(at + 1))
        }
        _ => None,
    }
}

/// Checks one command; returns a problem, if any.
fn check(cmd: &str, targets: &[String]) -> Option<String> {
    let w = words(cmd);
    let first = w.first()?;
    if first == "make" {
        let bad: Vec<&String> = w[1..].iter().filter(|t| !targets.contains(t)).collect();
        return (!bad.is_empty()).then(|| format!("no make target {bad:?}"));
    }
    for path in w
        .iter()
        .filter(|x| x.starts_with("scripts/") || x.starts_with("mpi-launch/"))
    {
        if !exists(path) {
            return Some(format!("{path} does not exist"));
        }
    }
    if let Some(args) = aiperf_args(&w) {
        let argv = std::iter::once("aiperf".to_string()).chain(args);
        if let Err(e) = Cli::try_parse_from(argv) {
            return Some(format!("aiperf does not accept it: {}", e.kind()));
        }
    }
    None
}

#[test]
fn every_command_in_the_pages_names_real_targets_files_and_flags() {
    let targets = make_targets();
    assert!(targets.iter().any(|t| t == "test"), "{targets:?}");
    let mut problems = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        for cmd in sh_commands(&text).into_iter().chain(quoted(&text)) {
            checked += 1;
            if let Some(p) = check(&cmd, &targets) {
                problems.push(format!("{page}: `{cmd}`: {p}"));
            }
        }
    }
    assert!(checked > 40, "only {checked} commands found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_itself_refuses_wrong_commands() {
    let targets = make_targets();
    for bad in [
        "make no-such-target",
        "scripts/no-such-script",
        "scripts/no-such-*",
        "mpi-launch/mpirun-local 3 run --no-such-flag",
        "target/release/aiperf-score results/x --no-such-flag",
        "mpirun -np 5 aiperf comm-bench --bogus",
    ] {
        assert!(check(bad, &targets).is_some(), "{bad}");
    }
    assert!(check("VC=0 make bench-comm", &targets).is_none());
}

/// The offline commands the pages show (`aiperf ops` on a built-in architecture, `aiperf
/// score`/`aiperf-score` on a committed record set) run, and succeed or give a verdict.
#[test]
fn the_offline_commands_in_the_pages_run() {
    let mut ran = 0;
    for (page, text) in pages() {
        for cmd in sh_commands(&text) {
            let w = words(&cmd);
            let Some(args) = aiperf_args(&w) else {
                continue;
            };
            let runnable = match args.first().map(String::as_str) {
                Some("ops") => !args.iter().any(|a| a.ends_with(".json")),
                Some("score") => args
                    .get(1)
                    .is_some_and(|d| Path::new(&root().join(d)).join("primary.h5").is_file()),
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
                "{page}: `{cmd}` exited {code:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 2, "only {ran} offline commands ran");
}
