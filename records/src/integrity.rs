//! Whether a run's records are the ones it wrote (docs/design.md §6, schemas 3 and 4): every dataset's
//! digest chain in every file, each chain's end against what `primary.h5` recorded at the
//! clean stop, every group file's attributes against the same record, no attribute outside
//! the schema (nothing would seal it), the run digest against every sealed attribute, and a
//! digest copied from a job log.

use serde::Serialize;

use crate::digest::{self, ChainEnd, Digest};
use crate::reader::{GroupRecords, Run};
use crate::schema::{group_datasets, group_file, PRIMARY_FILE};

/// What the digests say.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Integrity {
    /// `intact`, `altered`, `unverifiable` (schemas 1 and 2) or `incomplete` (intact
    /// chains, but no run digest: the run did not stop cleanly).
    pub records: &'static str,
    /// The run digest recomputed from the records (hex), when they hold one.
    pub run_digest: Option<String>,
    /// Whether `--digest` was given and matched (`None`: not given).
    pub digest_matches: Option<bool>,
    /// What breaks the result: each alteration found.
    pub problems: Vec<String>,
    /// What qualifies it.
    pub notes: Vec<String>,
}

/// Checks `run`'s records; `expected` is a run digest from a job log (`--digest`).
pub fn check(run: &Run, expected: Option<&Digest>) -> Integrity {
    let mut out = Integrity {
        records: "intact",
        run_digest: None,
        digest_matches: None,
        problems: Vec::new(),
        notes: Vec::new(),
    };
    if run.info.schema_version < 3 {
        out.records = "unverifiable";
        out.problems.push(format!(
            "schema {} records are not sealed as schema 3 requires (every attribute and dataset under the run digest): they cannot be verified (re-run with this aiperf)",
            run.info.schema_version
        ));
        if expected.is_some() {
            out.digest_matches = Some(false);
        }
        return out;
    }
    for g in (0..run.info.groups).filter(|g| !run.groups.iter().any(|r| r.group == *g)) {
        out.notes.push(format!(
            "{} is missing: its rows cannot be verified",
            group_file(g)
        ));
    }
    check_unsealed(run, &mut out);
    check_primary_chains(run, &mut out);
    for g in &run.groups {
        check_group(run, g, &mut out);
    }
    check_run_digest(run, expected, &mut out);
    if !out.problems.is_empty() {
        out.records = "altered";
    } else if run.groups.len() < run.info.groups as usize {
        out.records = "incomplete";
    }
    out
}

/// Attributes outside the schema: nothing seals them, so they cannot be trusted.
fn check_unsealed(run: &Run, out: &mut Integrity) {
    let files = std::iter::once((PRIMARY_FILE.to_string(), &run.info.unsealed)).chain(
        run.groups
            .iter()
            .map(|g| (group_file(g.group), &g.unsealed)),
    );
    for (file, names) in files {
        for name in names {
            out.problems.push(format!(
                "{file}: attribute {name:?} is not part of schema {}, so no digest covers it: it was added after the run",
                run.info.schema_version
            ));
        }
    }
}

/// Compares a recomputed chain end with the recorded one (if any), naming the dataset.
fn compare_end(
    file: &str,
    recomputed: &ChainEnd,
    recorded: Option<&ChainEnd>,
    sealed: bool,
    out: &mut Integrity,
) {
    match recorded {
        Some(c) if c == recomputed => {}
        Some(c) => out.problems.push(format!(
            "{file} {}: {} rows ending in digest {}…, but primary.h5 recorded {} ending in {}… at the run's end: rows were removed, added or replaced",
            recomputed.dataset,
            recomputed.rows,
            &recomputed.digest[..12],
            c.rows,
            c.digest.get(..12).unwrap_or(&c.digest)
        )),
        None if sealed => out.problems.push(format!(
            "{file} {}: primary.h5 recorded no end for this chain at the run's end: the seal was altered",
            recomputed.dataset
        )),
        None => {}
    }
}

/// The end of `dataset`'s chain in `file` recomputed from its rows' contents.
fn recomputed<T: hdf5::H5Type>(file: &str, dataset: &str, rows: &[T]) -> ChainEnd {
    let last = digest::chain(digest::chain_seed(file, dataset), rows);
    ChainEnd::new(dataset, rows.len() as u64, &last)
}

/// The primary's trials, architectures and TPE chains.
fn check_primary_chains(run: &Run, out: &mut Integrity) {
    let seed = |d| digest::chain_seed(PRIMARY_FILE, d);
    for (name, row) in [
        ("trials", digest::first_broken(seed("trials"), &run.trials)),
        ("tpe", digest::first_broken(seed("tpe"), &run.tpe)),
    ] {
        if let Some(row) = row {
            out.problems.push(format!(
                "primary.h5 {name} row {row}: its digest does not follow from its fields and the rows before it: the row was altered, inserted or removed"
            ));
        }
    }
    let ends = [
        recomputed(PRIMARY_FILE, "trials", &run.trials),
        ChainEnd::new(
            "architectures",
            run.architecture_rows.len() as u64,
            &digest::architecture_chain(seed("architectures"), &run.architecture_rows),
        ),
        recomputed(PRIMARY_FILE, "tpe", &run.tpe),
    ];
    let recorded = run.info.primary_chains.as_deref();
    for end in &ends {
        let r = recorded.and_then(|r| r.iter().find(|c| c.dataset == end.dataset));
        compare_end(PRIMARY_FILE, end, r, recorded.is_some(), out);
    }
}

/// One group file: its epoch chain row by row, every chain's end and its ranks against
/// what `primary.h5` recorded.
fn check_group(run: &Run, g: &GroupRecords, out: &mut Integrity) {
    let file = group_file(g.group);
    let seed = |d| digest::chain_seed(&file, d);
    for (name, row) in [
        ("epochs", digest::first_broken(seed("epochs"), &g.epochs)),
        ("steps", digest::first_broken(seed("steps"), &g.steps)),
    ] {
        if let Some(row) = row {
            out.problems.push(format!(
                "{file} {name} row {row}: its digest does not follow from its fields and the rows before it: the row was altered, inserted or removed"
            ));
        }
    }
    let Some(chains) = &run.info.group_chains else {
        return;
    };
    let Some(recorded) = chains.iter().find(|c| c.group == g.group) else {
        out.notes.push(format!(
            "primary.h5 recorded no final digests for group {} (it did not stop cleanly): its epoch chain is intact up to its last row",
            g.group
        ));
        return;
    };
    if recorded.ranks != g.ranks {
        out.problems.push(format!(
            "{file}: attribute \"accelerators\" is {}, but primary.h5 recorded {} ranks for group {} at the run's end: the file was altered",
            g.ranks, recorded.ranks, g.group
        ));
    }
    let ends = [
        recomputed(&file, "epochs", &g.epochs),
        recomputed(&file, "monitor", &g.monitor),
        recomputed(&file, "trace", &g.trace),
        recomputed(&file, "steps", &g.steps),
    ];
    let datasets = group_datasets(run.info.schema_version);
    for end in ends
        .iter()
        .filter(|e| datasets.contains(&e.dataset.as_str()))
    {
        let r = recorded.chains.iter().find(|c| c.dataset == end.dataset);
        compare_end(&file, end, r, true, out);
    }
}

/// The run digest over every sealed attribute, against the stored one and the one given.
fn check_run_digest(run: &Run, expected: Option<&Digest>, out: &mut Integrity) {
    let i = &run.info;
    let Some(stored) = &i.run_digest else {
        if out.problems.is_empty() {
            out.records = "incomplete";
        }
        out.notes.push(
            "no run digest: the run did not stop cleanly, so nothing vouches for the rows after the last one a chain covers".into(),
        );
        if expected.is_some() {
            // Nothing was altered that anyone can tell: the digest cannot be matched.
            out.digest_matches = Some(false);
            out.notes.push(
                "--digest was given, but these records hold no run digest to match it (the run did not stop cleanly; a digest printed by an earlier job of a resumed run sealed the records as they were then)".into(),
            );
        }
        return;
    };
    if i.group_chains.is_none() || i.primary_chains.is_none() {
        out.problems.push(
            "primary.h5 holds a run digest but not the chain ends it seals (group_digests, primary_digests): the seal was altered".into(),
        );
    }
    let recomputed = digest::run_digest(&i.sealed);
    let hex = digest::hex(&recomputed);
    if !stored.eq_ignore_ascii_case(&hex) {
        out.problems.push(
            "primary.h5: its run digest does not match its attributes (configuration, dataset identity, search record, times, world, groups, accelerators, hosts, devices, seed, precision, resumes and the chain ends): they were altered".into(),
        );
    }
    if let Some(want) = expected {
        let ok = *want == recomputed;
        out.digest_matches = Some(ok);
        if !ok {
            out.problems.push(format!(
                "the records' run digest {hex} is not the one given with --digest ({}): these are not the records that job wrote",
                digest::hex(want)
            ));
        }
    }
    out.run_digest = Some(hex);
}
