//! Reading the repository's Markdown for the documentation tests: every page, the command
//! lines it shows (fenced shell blocks and inline code), its links, headings and the
//! repository paths it names; and the real command-line definitions those commands must
//! parse with.

#![allow(dead_code)] // each docs test binary uses its own subset

use std::path::{Path, PathBuf};

use aiperf::cli::Cli;
use clap::{Args, CommandFactory, Parser};

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Top-level folders that hold no page a user reads: build outputs, datasets, git's own.
const NOT_PAGES: &[&str] = &["target", "data", ".git", "node_modules"];

/// Every file below the repository's root outside the top-level folders `skip`, sorted.
pub fn files(skip: &[&str]) -> Vec<PathBuf> {
    fn walk(dir: &Path, skip: &[&str], out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if !path.is_dir() {
                out.push(path);
            } else if !(dir == root() && skip.contains(&name.as_str())) {
                walk(&path, skip, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), skip, &mut out);
    out.sort();
    out
}

/// One Markdown page: its path from the root and its text.
pub struct Page {
    /// The path from the repository's root, e.g. `docs/centre.md`.
    pub name: String,
    /// The page's text.
    pub text: String,
}

impl Page {
    /// The folder the page's relative links start from.
    pub fn dir(&self) -> PathBuf {
        root().join(&self.name).parent().unwrap().to_path_buf()
    }
}

/// Every Markdown file of the repository (outside build outputs and data), sorted.
pub fn pages() -> Vec<Page> {
    files(NOT_PAGES)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md"))
        .map(|f| Page {
            name: f.strip_prefix(root()).unwrap().display().to_string(),
            text: std::fs::read_to_string(&f).unwrap(),
        })
        .collect()
}

/// The text outside fenced code blocks (prose, tables, inline code).
pub fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
            continue;
        }
        if !inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The command lines of a page's `sh`/`bash` blocks: comments dropped, `\` continuations
/// joined.
pub fn sh_commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    let mut pending = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            inside = !inside && (lang == "sh" || lang == "bash");
            continue;
        }
        if !inside {
            continue;
        }
        let cmd = t.split(" #").next().unwrap().trim();
        if cmd.starts_with('#') {
            continue;
        }
        if let Some(head) = cmd.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(cmd);
        let full = std::mem::take(&mut pending).trim().to_string();
        if !full.is_empty() {
            out.push(full);
        }
    }
    out
}

/// The inline code spans of the prose.
pub fn code_spans(text: &str) -> Vec<String> {
    prose(text)
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// First words that make an inline code span a command to check.
const COMMAND_STARTS: &[&str] = &[
    "make ",
    "scripts/",
    "mpi-launch/",
    "aiperf ",
    "aiperf-score ",
    "aiperf-data-prep ",
    "target/release/",
    "mpirun ",
    "srun ",
];

/// The inline code spans that are command lines.
pub fn inline_commands(text: &str) -> Vec<String> {
    code_spans(text)
        .into_iter()
        .filter(|s| COMMAND_STARTS.iter().any(|c| s.starts_with(c)))
        .collect()
}

/// Every command a page shows.
pub fn commands(text: &str) -> Vec<String> {
    let mut all = sh_commands(text);
    all.extend(inline_commands(text));
    all
}

/// The targets the Makefile defines.
pub fn make_targets() -> Vec<String> {
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
pub fn words(cmd: &str) -> Vec<String> {
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
        .take_while(|w| !matches!(*w, ">" | "|" | "&&" | ";" | "2>&1" | "||"))
        .filter(|w| *w != "…" && *w != "...")
        .map(|w| w.trim_matches(['"', '\'']).to_string())
        .collect()
}

/// Whether a repository path exists, from the root or from `dir`; `prefix*` matches a file
/// whose name starts with `prefix`.
pub fn exists(path: &str, dir: &Path) -> bool {
    let found = |base: &Path| match path.split_once('*') {
        None => base.join(path).exists(),
        Some((stem, _)) => {
            let (d, prefix) = stem.rsplit_once('/').unwrap_or((".", stem));
            std::fs::read_dir(base.join(d)).is_ok_and(|mut entries| {
                entries
                    .any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with(prefix)))
            })
        }
    };
    found(&root()) || found(dir)
}

/// Which program a command runs, and its arguments.
#[derive(Debug, PartialEq)]
pub enum Program {
    /// `aiperf` with these arguments (after the program name).
    Aiperf(Vec<String>),
    /// `aiperf-score`.
    Score(Vec<String>),
    /// `aiperf-data-prep`.
    DataPrep(Vec<String>),
}

fn program_at(w: &[String], at: usize) -> Option<Program> {
    let name = w.get(at)?.rsplit('/').next()?.to_string();
    let rest = w[at + 1..].to_vec();
    match name.as_str() {
        "aiperf" => Some(Program::Aiperf(rest)),
        "aiperf-score" => Some(Program::Score(rest)),
        "aiperf-data-prep" => Some(Program::DataPrep(rest)),
        _ => None,
    }
}

/// The aiperf program a command runs (directly, under a launcher, or under mpirun/srun).
pub fn program(w: &[String]) -> Option<Program> {
    match w.first()?.as_str() {
        "mpi-launch/mpirun-local" => Some(Program::Aiperf(w.get(2..)?.to_vec())),
        "mpi-launch/srun-aiperf" | "mpi-launch/mpirun-aiperf" => {
            Some(Program::Aiperf(w[1..].to_vec()))
        }
        "mpirun" | "mpiexec" | "srun" => {
            let at = w.iter().position(|x| {
                let n = x.rsplit('/').next().unwrap_or("");
                n == "aiperf" || n == "aiperf-score"
            })?;
            program_at(w, at)
        }
        _ => program_at(w, 0),
    }
}

/// Parses a program's arguments with the real clap definitions; `Err` says why not. A span
/// that only names a subcommand (`aiperf audit`) may lack its required arguments.
pub fn parse(p: &Program) -> Result<(), String> {
    use clap::error::ErrorKind;
    let (name, args, result) = match p {
        Program::Aiperf(a) => {
            let argv = std::iter::once("aiperf".to_string()).chain(a.iter().cloned());
            (
                "aiperf",
                a,
                Cli::command()
                    .version("0")
                    .try_get_matches_from(argv)
                    .map(drop),
            )
        }
        Program::Score(a) => {
            let cmd = aiperf_records::cli::ScoreArgs::augment_args(
                clap::Command::new("aiperf-score").version("0"),
            );
            let argv = std::iter::once("aiperf-score".to_string()).chain(a.iter().cloned());
            ("aiperf-score", a, cmd.try_get_matches_from(argv).map(drop))
        }
        Program::DataPrep(a) => {
            let argv = std::iter::once("aiperf-data-prep".to_string()).chain(a.iter().cloned());
            let r = aiperf_data_prep::cli::Cli::try_parse_from(argv).map(drop);
            ("aiperf-data-prep", a, r)
        }
    };
    match result {
        Ok(()) => Ok(()),
        // The bare program name (`target/release/aiperf`) names it; nothing to parse.
        Err(_) if args.is_empty() => Ok(()),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => Ok(()),
        Err(e)
            if a_subcommand_named(args)
                && matches!(
                    e.kind(),
                    ErrorKind::MissingRequiredArgument | ErrorKind::MissingSubcommand
                ) =>
        {
            Ok(())
        }
        Err(e) => Err(format!("{name} does not accept it: {}", e.kind())),
    }
}

fn a_subcommand_named(args: &[String]) -> bool {
    args.len() <= 1
}

/// The placement flags an `mpirun`/`mpiexec` line needs for `aiperf run` (rank 0, the
/// primary, is one rank more on the first node; the other nodes need equal training ranks).
pub const PLACEMENT: &[&str] = &[
    "--map-by",
    "-npernode",
    "--npernode",
    "-N",
    "--host",
    "-H",
    "--hostfile",
    "-hostfile",
    "--rankfile",
    "-ppn",
    "-f",
];

/// Checks one command; returns a problem, if any.
pub fn check(cmd: &str, targets: &[String], dir: &Path) -> Option<String> {
    let w = words(cmd);
    let first = w.first()?;
    if first == "make" {
        let bad: Vec<&String> = w[1..]
            .iter()
            .filter(|t| !t.contains('=') && !targets.contains(t))
            .collect();
        return (!bad.is_empty()).then(|| format!("no make target {bad:?}"));
    }
    for path in w
        .iter()
        .filter(|x| x.starts_with("scripts/") || x.starts_with("mpi-launch/"))
    {
        if !exists(path, dir) {
            return Some(format!("{path} does not exist"));
        }
    }
    let p = program(&w)?;
    if let Err(e) = parse(&p) {
        return Some(e);
    }
    let runs_benchmark = matches!(&p, Program::Aiperf(a) if a.first().is_some_and(|s| s == "run"));
    let mpirun = matches!(first.as_str(), "mpirun" | "mpiexec");
    if mpirun && runs_benchmark && !w.iter().any(|x| PLACEMENT.contains(&x.as_str())) {
        return Some(format!(
            "an mpirun line for `aiperf run` names no placement (one of {PLACEMENT:?}): rank 0 \
             is one rank more on the first node"
        ));
    }
    None
}

/// A heading's anchor as GitHub makes it: lower case, punctuation other than `-` and `_`
/// dropped, spaces as `-`.
pub fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The headings of a page (outside code blocks), without their `#`s.
pub fn headings(text: &str) -> Vec<String> {
    prose(text)
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim().to_string())
        .collect()
}

/// The link targets `[text](target)` of a page's prose.
pub fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                out.push(after[..end].to_string());
                rest = &after[end..];
            }
            None => break,
        }
    }
    out
}

/// Checks a relative link from `page`: the file exists and an anchor names a heading there.
pub fn check_link(page: &Page, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
    let path = if file.is_empty() {
        root().join(&page.name)
    } else {
        page.dir().join(file)
    };
    if !path.exists() {
        return Some(format!("link to {target}: no such file"));
    }
    if fragment.is_empty() {
        return None;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let anchors: Vec<String> = headings(&text).iter().map(|h| anchor(h)).collect();
    (!anchors.iter().any(|a| a == fragment))
        .then(|| format!("link to {target}: no heading with that anchor ({anchors:?})"))
}

/// Top-level folders of the repository whose paths a page may name.
const TRACKED_DIRS: &[&str] = &[
    "src/",
    "ir/",
    "records/",
    "data-prep/",
    "docs/",
    "scripts/",
    "mpi-launch/",
    "tests/",
    "benches/",
    "results/",
    ".ci/",
];

/// The inline code spans that name a repository path (not a generated one: no `target/`,
/// `data/` or placeholders).
pub fn named_paths(text: &str) -> Vec<String> {
    code_spans(text)
        .into_iter()
        .filter(|s| !s.contains([' ', '<', '{', '$', '…']) && !s.contains("..."))
        .map(|s| {
            s.trim_end_matches([':', ',', '.'])
                .split(':')
                .next()
                .unwrap()
                .to_string()
        })
        .filter(|s| TRACKED_DIRS.iter().any(|d| s.starts_with(d)))
        .collect()
}

/// The real `aiperf` command definition (for checks over every subcommand's flags).
pub fn aiperf_command() -> clap::Command {
    Cli::command()
}
