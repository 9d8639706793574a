//! The pages speak to users and say only what is true: no development history in any page,
//! and no issue number or borrowed machine in any file of the repository; the design they
//! cite is the repository's own `docs/design.md`, by sections it has; claims once found
//! false (a precision the flag refuses, a data folder `aiperf run` never reads, a section
//! in the wrong page, an audit mode the code does not pick, …) cannot come back — each
//! check is shown to catch the false sentence it guards against; one flag name per setting
//! across subcommands; the centre's troubleshooting table quotes messages the code really
//! prints; and the reviewers' static scorer builds without the benchmark's set-up.

#[path = "common/markdown.rs"]
mod markdown;

use std::collections::BTreeMap;

use markdown::{pages, prose, root};
use regex::Regex;

/// Words and marks of development history that no page may carry, with why.
const HISTORY: &[(&str, &str)] = &[
    (r"(?i)\bissues? #?\d+", "an issue number"),
    (
        r"(?i)\bthis VM\b",
        "\"this VM\" (describe the machine: CPU model, cores)",
    ),
    (r"(?i)\blent\b", "a machine on loan"),
    (r"(?i)\bdevice calls?\b", "a device call"),
    (
        r"(?i)\b(this|a|the|each|every|later|earlier|previous|next) session\b",
        "a session",
    ),
    (r"\.\./shared\b", "a path outside the repository"),
    (
        r"DESIGN(\.md)? §|DESIGN\.md",
        "the design outside the repository (cite docs/design.md)",
    ),
];

/// Hex words with both digits and letters as git writes commits: 7 characters (the short
/// form) or 40. (Digests are 64 characters, and the prefixes the pages quote 8.)
fn commit_hashes(text: &str) -> Vec<String> {
    let re = Regex::new(r"\b([0-9a-f]{7}|[0-9a-f]{40})\b").unwrap();
    re.find_iter(text)
        .map(|m| m.as_str().to_string())
        .filter(|w| {
            w.chars().any(|c| c.is_ascii_digit()) && w.chars().any(|c| c.is_ascii_alphabetic())
        })
        .collect()
}

fn history_in(text: &str) -> Vec<String> {
    let mut found: Vec<String> = HISTORY
        .iter()
        .filter_map(|(re, why)| {
            Regex::new(re)
                .unwrap()
                .find(text)
                .map(|m| format!("{why}: \"{}\"", m.as_str()))
        })
        .collect();
    found.extend(
        commit_hashes(&prose(text))
            .into_iter()
            .map(|h| format!("a commit hash: {h}")),
    );
    found
}

#[test]
fn no_page_carries_development_history() {
    let mut problems = Vec::new();
    for page in pages() {
        for p in history_in(&page.text) {
            problems.push(format!("{}: {p}", page.name));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Words this file forbids, assembled at run time so that the file does not carry them.
fn forbidden_words() -> [String; 2] {
    [["iss", "ue"].concat(), ["le", "nt"].concat()]
}

#[test]
fn the_history_check_catches_what_the_pages_once_said() {
    let [issue, lent] = forbidden_words();
    let mut caught = Vec::new();
    for old in [
        format!("spends lines on the {lent} H200 and device calls carrying target/gpu-carry"),
        format!("measured on this VM ({issue} 24, 2026-12-02)"),
        "The design is in `../shared/DESIGN.md` (sections 4–6 are contracts).".into(),
        "the last bucket on the step's own thread (`a273461`, `32ecb29`)".into(),
        format!("no device was {lent} this session"),
    ] {
        let found = history_in(&old);
        assert!(!found.is_empty(), "not caught: {old}");
        caught.extend(found);
    }
    // Each word of history is shown to catch one of the sentences.
    for (_, why) in HISTORY {
        assert!(
            caught.iter().any(|c| c.starts_with(&format!("{why}: "))),
            "no sentence shows the check for {why}"
        );
    }
    assert!(history_in("run digest sealed; 2 ranks per node; ResNet-50 at 224x224").is_empty());
}

/// Every text file of the repository that code, help texts or docs are written in.
fn sources() -> Vec<(String, String)> {
    // Outside results/ but for its one tracked page (the rest are run records).
    let records = root().join("results/README.md");
    markdown::files(&["target", "data", ".git", "results"])
        .into_iter()
        .chain(std::iter::once(records))
        .filter_map(|p| {
            let rel = p.strip_prefix(root()).unwrap().display().to_string();
            // This file names what it forbids.
            let text = std::fs::read_to_string(&p).ok()?;
            (rel != "tests/docs_claims.rs").then_some((rel, text))
        })
        .collect()
}

#[test]
fn the_design_cited_is_the_repositorys_own_by_sections_it_has() {
    let design = std::fs::read_to_string(root().join("docs/design.md")).unwrap();
    let sections: Vec<u32> = markdown::headings(&design)
        .iter()
        .filter_map(|h| h.split_once(". ").and_then(|(n, _)| n.parse().ok()))
        .collect();
    assert!(
        (1..=9).all(|n| sections.contains(&n)),
        "docs/design.md sections: {sections:?}"
    );
    let cite = Regex::new(r"design\.md(?:\)|`)? ?§ ?(\d+)").unwrap();
    let mut problems = Vec::new();
    let mut cited = 0;
    for (file, text) in sources() {
        if text.contains("DESIGN.md") || text.contains("DESIGN §") {
            problems.push(format!(
                "{file}: cites DESIGN.md, which is not in the repository"
            ));
        }
        for c in cite.captures_iter(&text) {
            cited += 1;
            let n: u32 = c[1].parse().unwrap();
            if !sections.contains(&n) {
                problems.push(format!("{file}: cites docs/design.md §{n}, which it lacks"));
            }
        }
    }
    assert!(cited > 30, "only {cited} citations of docs/design.md found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Claims once false, each a pattern no page may match and the sentence it was found in.
const FALSE_CLAIMS: &[(&str, &str, &str)] = &[
    (
        "a CUDA audit was said to use the tolerance; the mode follows rank count and threads",
        r"(?is)(on cuda|cuda audits?)[^.;]{0,120}(expect|use|uses|take|takes|get|gets) the tolerance",
        "deterministic for a fixed thread count. On CUDA, cuDNN's autotuned algorithms are not \
         fixed by aiperf: expect the tolerance there;",
    ),
    (
        "the audit was said to need the run's launcher and rank count; rank 0 alone may audit",
        r"(?i)same launcher,? same number of ranks|launched like the run it audits",
        "launched like the run it audits (same launcher, same number of ranks): rank 0 draws",
    ),
    (
        "scripts/tools/weak-scaling was said to be the measurement on a real cluster; it needs the \
         virtual cluster and root",
        r"(?is)real cluster[^.]{0,120}same command|same command[^.]{0,120}real cluster",
        "On a real cluster the per-hop latency is microseconds;\nthe same command there is the \
         measurement that matters.",
    ),
];

#[test]
fn claims_once_false_do_not_come_back() {
    let mut problems = Vec::new();
    for (why, re, old) in FALSE_CLAIMS {
        let re = Regex::new(re).unwrap();
        assert!(
            re.is_match(old),
            "the check for \"{why}\" misses its sentence"
        );
        for page in pages() {
            if let Some(m) = re.find(&page.text) {
                problems.push(format!("{}: {why}: \"{}\"", page.name, m.as_str()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `*Section* in [page](link)` / `in the top-level README`: the page has that heading.
fn section_references(page: &markdown::Page) -> Vec<String> {
    let re = Regex::new(
        r"\*([^*\n]+)\*,? (?:in|of) (?:the top-level (README)|\[[^\]]*\]\(([^)#]+)[^)]*\))",
    )
    .unwrap();
    let mut problems = Vec::new();
    for c in re.captures_iter(&page.text) {
        let target = match (c.get(2), c.get(3)) {
            (Some(_), _) => root().join("README.md"),
            (_, Some(link)) => page.dir().join(link.as_str()),
            _ => continue,
        };
        let text = std::fs::read_to_string(&target).unwrap_or_default();
        let section = c[1].trim();
        if !markdown::headings(&text)
            .iter()
            .any(|h| h.starts_with(section))
        {
            problems.push(format!(
                "\"{section}\" is not a heading of {}",
                target.display()
            ));
        }
    }
    problems
}

#[test]
fn sections_named_in_another_page_are_there() {
    let mut problems = Vec::new();
    for page in pages() {
        for p in section_references(&page) {
            problems.push(format!("{}: {p}", page.name));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let old = markdown::Page {
        name: "mpi-launch/README.md".into(),
        text: "must be a CUDA build (see *Choosing libtorch* in the top-level README).".into(),
    };
    assert_eq!(
        section_references(&old).len(),
        1,
        "the check misses its sentence"
    );
}

/// The values a page lists for the records' `precision` (the table row naming it).
fn documented_precisions(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("| `precision`"))
        .flat_map(|l| {
            l.split('|')
                .nth(3)
                .unwrap_or("")
                .split('`')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter(|v| v.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect()
}

#[test]
fn the_precisions_documented_are_the_ones_the_flag_accepts() {
    let run = markdown::aiperf_command()
        .get_subcommands()
        .find(|s| s.get_name() == "run")
        .cloned()
        .unwrap();
    let flag = run
        .get_arguments()
        .find(|a| a.get_long() == Some("precision"))
        .unwrap();
    let mut accepted: Vec<String> = flag
        .get_possible_values()
        .iter()
        .map(|v| v.get_name().to_string())
        .collect();
    accepted.extend(["simulated".into(), "emulated".into()]);
    let records = std::fs::read_to_string(root().join("results/README.md")).unwrap();
    let listed = documented_precisions(&records);
    assert!(
        !listed.is_empty(),
        "results/README.md lists no precision values"
    );
    for p in &listed {
        assert!(
            accepted.contains(p),
            "results/README.md lists precision `{p}`; --precision accepts {accepted:?}"
        );
    }
    let old = "| `precision` | string | `fp32`, `tf32`, `bf16` or `fp16` (`simulated`/`emulated` for the stand-in trainers) |";
    assert!(
        documented_precisions(old)
            .iter()
            .any(|p| !accepted.contains(p)),
        "the check misses its row"
    );
}

/// The `--out data/<name>` folders of the `aiperf-data-prep` lines of a text that `aiperf
/// run` would not look in (`data/<dataset>`).
fn unread_data_folders(text: &str) -> Vec<String> {
    let re = Regex::new(r"--out data/([A-Za-z0-9_.-]+)").unwrap();
    text.lines()
        .filter(|l| l.contains("aiperf-data-prep"))
        .flat_map(|l| {
            re.captures_iter(l)
                .map(|c| c[1].to_string())
                .collect::<Vec<_>>()
        })
        .filter(|d| !aiperf::config::DATASETS.contains(&d.as_str()))
        .collect()
}

#[test]
fn datasets_are_packed_where_aiperf_run_looks() {
    let mut problems = Vec::new();
    let mut seen = 0;
    for page in pages() {
        seen += page.text.matches("--out data/").count();
        for d in unread_data_folders(&page.text) {
            problems.push(format!(
                "{}: packs into data/{d}; aiperf run reads data/<dataset> ({:?})",
                page.name,
                aiperf::config::DATASETS
            ));
        }
    }
    assert!(seen >= 3, "only {seen} pack commands found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let old =
        "aiperf-data-prep imagenet      --src ILSVRC2012 --out data/imagenet-224 --size 224 \\";
    assert_eq!(
        unread_data_folders(old),
        ["imagenet-224"],
        "the check misses its line"
    );
}

#[test]
fn the_readme_names_the_rust_it_needs_and_how_to_get_it() {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let need = toml
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("Rust ≥ {need}")) || readme.contains(&format!("Rust >= {need}")),
        "README.md must name Rust ≥ {need} (Cargo.toml's rust-version)"
    );
    assert!(
        readme.contains("rustup"),
        "README.md must say to install Rust with rustup"
    );
}

/// Flags that take one of a fixed set of values, across subcommands: the same set under two
/// names is one setting spelt two ways.
fn settings_spelt_twice(cmd: &clap::Command) -> Vec<String> {
    let mut by_values: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for sub in cmd.get_subcommands() {
        for arg in sub.get_arguments() {
            let (Some(long), true) = (arg.get_long(), arg.get_action().takes_values()) else {
                continue;
            };
            let mut values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect();
            values.sort();
            if values.len() < 2 || values == ["false", "true"] {
                continue;
            }
            by_values
                .entry(values)
                .or_default()
                .entry(long.to_string())
                .or_default()
                .push(sub.get_name().to_string());
        }
    }
    by_values
        .into_iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|(values, names)| format!("{values:?} is set by {names:?}"))
        .collect()
}

#[test]
fn one_flag_name_per_setting_across_subcommands() {
    let problems = settings_spelt_twice(&markdown::aiperf_command());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let values = ["auto", "host", "device"];
    let old = clap::Command::new("aiperf")
        .subcommand(
            clap::Command::new("run").arg(
                clap::Arg::new("a")
                    .long("exchange-staging")
                    .value_parser(values),
            ),
        )
        .subcommand(
            clap::Command::new("dp-check")
                .arg(clap::Arg::new("b").long("staging").value_parser(values)),
        );
    assert_eq!(
        settings_spelt_twice(&old).len(),
        1,
        "the check misses --staging"
    );
}

#[test]
fn the_claims_about_commands_once_false_are_refused() {
    let targets = markdown::make_targets();
    for (why, old) in [
        ("ops takes --arch", "aiperf ops resnet50"),
        (
            "placement on a multi-node mpirun",
            "mpirun -np 65 aiperf run --config imagenet --data /scratch/imagenet-aipk",
        ),
        ("--precision has no tf32", "aiperf run --precision tf32"),
        (
            "dp-check's staging is --exchange-staging",
            "aiperf dp-check --staging host",
        ),
    ] {
        assert!(
            markdown::check(old, &targets, &root()).is_some(),
            "{why}: `{old}` passes"
        );
    }
}

/// The troubleshooting table's rows: the message fragments (in backticks) of the first cell.
fn troubleshooting_fragments(centre: &str) -> Vec<String> {
    let section = centre
        .split("\n## Troubleshooting")
        .nth(1)
        .expect("docs/centre.md has a Troubleshooting section")
        .split("\n## ")
        .next()
        .unwrap();
    section
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|--") && !l.starts_with("| message"))
        .filter_map(|l| l.split('|').nth(1))
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_troubleshooting_table_quotes_messages_the_code_prints() {
    let centre = std::fs::read_to_string(root().join("docs/centre.md")).unwrap();
    let fragments = troubleshooting_fragments(&centre);
    assert!(
        fragments.len() >= 15,
        "only {} refusals listed",
        fragments.len()
    );
    let code: String = sources()
        .into_iter()
        .filter(|(f, _)| {
            [
                "src/",
                "records/src/",
                "data-prep/src/",
                "ir/src/",
                "mpi-launch/",
                "scripts/",
                "container/",
            ]
            .iter()
            .any(|d| f.starts_with(d))
        })
        .map(|(_, t)| t)
        .collect();
    let missing: Vec<&String> = fragments
        .iter()
        .filter(|f| !code.contains(f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/centre.md quotes messages the code does not print: {missing:?}"
    );
    // The refusals a centre meets first are all there (in a row's message or meaning).
    let rows: Vec<&str> = centre.lines().filter(|l| l.starts_with("| `")).collect();
    for topic in [
        "coll_han",
        "--results",
        "CUDA-aware",
        "train.aipk",
        "replica ranks",
        "--resume",
        "libtorch",
    ] {
        assert!(
            rows.iter().any(|r| r.contains(topic)),
            "the troubleshooting table lacks a refusal about {topic}"
        );
    }
}

#[test]
fn the_static_scorer_needs_none_of_the_benchmarks_set_up() {
    let makefile = std::fs::read_to_string(root().join("Makefile")).unwrap();
    let rule = makefile
        .lines()
        .find(|l| l.starts_with("score-static:"))
        .unwrap();
    assert_eq!(
        rule.trim(),
        "score-static:",
        "make score-static must not run the set-up first"
    );
    let script = std::fs::read_to_string(root().join("scripts/dev/build-static-score")).unwrap();
    for needless in [
        "scripts/dev/setup",
        "resolve_libtorch",
        "LIBTORCH=",
        "mpicc",
        "slurm",
        "chromium",
    ] {
        assert!(
            !script.contains(needless),
            "build-static-score needs {needless}"
        );
    }
    assert!(
        script.contains("check_rust"),
        "build-static-score checks the Rust version"
    );
}
