//! No file of the repository — code, scripts, tests, pages — carries development history:
//! no issue number and no borrowed machine a measurement was once made on. Every file git
//! tracks (or would add) is read; binary files are skipped.

#[path = "common/markdown.rs"]
mod markdown;

use markdown::root;
use regex::Regex;

/// Words this file forbids, assembled at run time so that the file does not carry them.
fn forbidden_words() -> [String; 2] {
    [["iss", "ue"].concat(), ["le", "nt"].concat()]
}

/// Development history as it shows in any file, code and scripts included: an issue's number
/// (`#` and plural too) or the borrowed machine a measurement was made on.
fn history_pattern() -> Regex {
    let [issue, lent] = forbidden_words();
    Regex::new(&format!(
        r"(?i)\b{issue}s? ?#?[0-9]+|\b{lent} (h200|machine)"
    ))
    .unwrap()
}

/// The repository's files: those git tracks and those it would add (not ignored); outside a
/// git checkout, every file but build outputs, data and run records.
fn repository_files() -> Vec<String> {
    let listed = std::process::Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success());
    match listed {
        Some(out) => {
            let mut files: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .split('\0')
                .filter(|f| !f.is_empty())
                .map(String::from)
                .collect();
            files.sort();
            files.dedup();
            files
        }
        None => markdown::files(&["target", "data", ".git", "results"])
            .into_iter()
            .map(|p| p.strip_prefix(root()).unwrap().display().to_string())
            .filter(|f| {
                !f.split('/')
                    .any(|c| c.starts_with(".venv") || c == "__pycache__")
            })
            .chain(std::iter::once("results/README.md".to_string()))
            .collect(),
    }
}

/// `file:line: text` for every line of a text file that matches `re` (binary files and
/// anything that is not UTF-8 are skipped).
fn lines_matching(re: &Regex, files: &[String]) -> Vec<String> {
    let binary = [".h5", ".png", ".svg", ".jpg", ".gz", ".xz"];
    let mut found = Vec::new();
    for file in files {
        if binary.iter().any(|ext| file.ends_with(*ext)) {
            continue;
        }
        // Deleted from the working tree but still tracked, a submodule, or not text.
        let Ok(bytes) = std::fs::read(root().join(file)) else {
            continue;
        };
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            if re.is_match(line) {
                found.push(format!("{file}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn no_file_of_the_repository_carries_development_history() {
    let re = history_pattern();
    let [issue, lent] = forbidden_words();
    for old in [
        format!("//! Physical consistency (rules-4, {issue} 22): records edited"),
        format!("/// {}: one message per mistake", ["Iss", "ue 23"].concat()),
        format!("# Loader benchmark ({issue}s 2 and 16): aiperf's loader"),
        format!("fixed in {} #7", issue.to_uppercase()),
        format!("(default 2.11.0, the {lent} H200's torch 2.11.0+cu130)"),
        format!("is checked on a {lent} machine"),
    ] {
        assert!(re.is_match(&old), "not caught: {old}");
    }
    assert!(!re.is_match(&format!("a si{lent} machine, and 12 {issue}s named by row")));
    let files = repository_files();
    assert!(
        files.iter().any(|f| f == "tests/docs_claims.rs") && files.len() > 100,
        "the repository's files were not listed: {} found",
        files.len()
    );
    let found = lines_matching(&re, &files);
    assert!(
        found.is_empty(),
        "development history (say what the code does instead):\n{}",
        found.join("\n")
    );
}
