//! What the pages quote of a record set is in the repository: every `results/run-N` a page
//! names is a tracked record set; every score a page shows (a block that begins
//! `aiperf score: results/run-N`) is what the scorer prints for that set, with the flags of
//! the command shown before it; and the figures the prose gives of a set (its score, its
//! trials and epochs) are the set's own.

use std::path::Path;
use std::process::Command;

#[path = "common/markdown.rs"]
mod markdown;
use markdown::{pages, root};

/// Every `results/run-DIGITS` named in `text`.
fn named_sets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("results/run-") {
        let tail = &rest[i + "results/run-".len()..];
        let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
        if !digits.is_empty() {
            out.push(format!("run-{digits}"));
        }
        rest = tail;
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn every_record_set_a_page_names_is_tracked() {
    let mut named = 0;
    for page in pages() {
        for set in named_sets(&page.text) {
            let dir = root().join("results").join(&set);
            assert!(
                dir.join("primary.h5").is_file(),
                "{} names results/{set}, which is not in the repository",
                page.name
            );
            named += 1;
        }
    }
    assert!(named >= 3, "only {named} record sets named");
}

/// `aiperf score ARGS` from the repository's root: its stdout and stderr.
fn score(args: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .arg("score")
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The fenced blocks of `text`, in order.
fn blocks(text: &str) -> Vec<String> {
    text.split("```")
        .skip(1)
        .step_by(2)
        .map(|b| b.split_once('\n').map_or("", |(_, body)| body).to_string())
        .collect()
}

/// The scorer's arguments in the last command of `block` that scores `set`
/// (`aiperf score …` or `aiperf-score …`), or just the set.
fn command_for(block: &str, set: &str) -> Vec<String> {
    block
        .lines()
        .rev()
        .find_map(|l| {
            let l = l.split('#').next().unwrap();
            let i = l.find(&format!("results/{set}"))?;
            let before = &l[..i];
            (before.ends_with("aiperf score ") || before.ends_with("aiperf-score "))
                .then(|| l[i..].split_whitespace().map(str::to_string).collect())
        })
        .unwrap_or_else(|| vec![format!("results/{set}")])
}

#[test]
fn every_score_a_page_shows_is_what_the_scorer_prints() {
    let mut shown = 0;
    for page in pages() {
        let blocks = blocks(&page.text);
        for (k, block) in blocks.iter().enumerate() {
            let Some(first) = block.lines().next() else {
                continue;
            };
            let Some(digits) = first.strip_prefix("aiperf score: results/run-") else {
                continue;
            };
            let set = format!("run-{digits}");
            let set = set.as_str();
            let args = match k {
                0 => vec![format!("results/{set}")],
                _ => command_for(&blocks[k - 1], set),
            };
            let printed = score(&args);
            let lines: Vec<&str> = printed.lines().collect();
            // A trimmed copy (`…` marks lines left out): every line shown is printed, in the
            // same order.
            let mut at = 0;
            for line in block.lines().filter(|l| l.trim() != "…") {
                match lines[at..].iter().position(|l| *l == line) {
                    Some(i) => at += i + 1,
                    None => panic!(
                        "{} shows `{line}`, which `aiperf score {}` does not print in that order:\n{printed}",
                        page.name,
                        args.join(" ")
                    ),
                }
            }
            shown += 1;
        }
    }
    assert!(shown >= 2, "only {shown} scores shown");
}

/// `text` with every run of white space one space (prose wraps anywhere).
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The figure on the line of `aiperf score DIR` that begins `label`, e.g. `129.886 GOPS`.
fn figure(printed: &str, label: &str) -> String {
    let line = printed
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no `{label}` line in:\n{printed}"));
    let rest = line.trim_start()[label.len()..].trim();
    rest.split(',').next().unwrap().trim().to_string()
}

#[test]
fn the_figures_the_prose_gives_of_a_set_are_its_own() {
    let run = |set: &str| aiperf_records::read_run(&root().join("results").join(set)).unwrap();
    let epochs = |r: &aiperf_records::Run| r.groups.iter().map(|g| g.epochs.len()).sum::<usize>();
    let page = |name: &str| flat(&std::fs::read_to_string(root().join(name)).unwrap());

    let set = "run-1796335463";
    let r = run(set);
    let printed = score(&[format!("results/{set}")]);
    let (sustained, regulated) = (
        figure(&printed, "score (sustained)"),
        figure(&printed, "regulated score"),
    );
    let claim = format!(
        "scored {sustained} sustained and {regulated} regulated, {} trials and {} epochs",
        r.trials.len(),
        epochs(&r)
    );
    assert!(
        page("docs/performance.md").contains(&claim),
        "docs/performance.md: `{claim}`"
    );
    let claim = format!(
        "{} epochs, {} ResNet-8 architectures",
        epochs(&r),
        r.architectures.len()
    );
    assert!(
        page("docs/centre.md").contains(&claim),
        "docs/centre.md: `{claim}`"
    );

    let set = "run-1796615264";
    let r = run(set);
    let claim = format!(
        "`results/{set}` (540-s `make run`, {} trials, {} epochs;",
        r.trials.len(),
        epochs(&r)
    );
    assert!(
        page("docs/performance.md").contains(&claim),
        "docs/performance.md: `{claim}`"
    );
    let duration = r.info.end_time_s.unwrap() - r.info.start_time_s;
    assert!((duration - 540.0).abs() < 30.0, "{set} ran {duration} s");
}

#[test]
fn a_page_naming_a_set_that_is_not_there_is_caught() {
    assert_eq!(
        named_sets("see `results/run-12` and results/run-12/primary.h5, results/run-"),
        ["run-12"]
    );
    assert!(!Path::new(&root().join("results/run-12")).exists());
}
