//! Whether a run's records are the ones it wrote (DESIGN.md §6): every group's digest
//! chain, the chains against what `primary.h5` recorded at the clean stop, the run digest
//! against the attributes it covers, and a digest copied from a job log.

use serde::Serialize;

use crate::digest::{self, Digest, GroupChain};
use crate::reader::Run;

/// What the digests say.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Integrity {
    /// `intact`, `altered`, `unverifiable` (schema 1) or `incomplete` (intact chains, but no
    /// run digest: the run did not stop cleanly).
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
    if run.info.schema_version < 2 {
        out.records = "unverifiable";
        out.problems.push(format!(
            "schema {} records carry no digests and no optimizer steps: they cannot be verified (re-run with this aiperf)",
            run.info.schema_version
        ));
        if expected.is_some() {
            out.digest_matches = Some(false);
        }
        return out;
    }
    check_chains(run, &mut out);
    check_run_digest(run, expected, &mut out);
    if !out.problems.is_empty() {
        out.records = "altered";
    }
    out
}

/// Each group's chain, and its end against the one `primary.h5` recorded.
fn check_chains(run: &Run, out: &mut Integrity) {
    for g in &run.groups {
        let file = crate::schema::group_file(g.group);
        if let Some(row) = digest::first_broken(g.group, &g.epochs) {
            out.problems.push(format!(
                "{file} epochs row {row}: its digest does not follow from its fields and the rows before it: the row was altered, inserted or removed"
            ));
            continue;
        }
        let Some(chains) = &run.info.group_chains else {
            continue;
        };
        let last = digest::hex(&digest::last(g.group, &g.epochs));
        let rows = g.epochs.len() as u64;
        match chains.iter().find(|c| c.group == g.group) {
            Some(c) if c.epochs == rows && c.digest == last => {}
            Some(c) => out.problems.push(format!(
                "{file}: {rows} epoch rows ending in digest {}…, but primary.h5 recorded {} ending in {}… at the run's end: rows were removed, added or replaced",
                &last[..12],
                c.epochs,
                c.digest.get(..12).unwrap_or(&c.digest)
            )),
            None => out.notes.push(format!(
                "primary.h5 recorded no final digest for group {} (it did not stop cleanly): its chain is intact up to its last row",
                g.group
            )),
        }
    }
}

/// The run digest over the recorded attributes and chains, against the stored one and
/// the one given.
fn check_run_digest(run: &Run, expected: Option<&Digest>, out: &mut Integrity) {
    let i = &run.info;
    let (Some(chains), Some(stored)) = (&i.group_chains, &i.run_digest) else {
        if out.problems.is_empty() {
            out.records = "incomplete";
        }
        out.notes.push(
            "no run digest: the run did not stop cleanly, so nothing vouches for the rows after the last one a chain covers".into(),
        );
        if expected.is_some() {
            out.digest_matches = Some(false);
            out.problems.push(
                "--digest was given, but these records hold no run digest to match it (the run did not stop cleanly)".into(),
            );
        }
        return;
    };
    let recomputed = run_digest(run, chains);
    let hex = digest::hex(&recomputed);
    if !stored.eq_ignore_ascii_case(&hex) {
        out.problems.push(
            "primary.h5: its run digest does not match its configuration, dataset identity, search record, start time and group digests: they were altered".into(),
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

/// The run digest of `run`'s attributes over `chains`.
fn run_digest(run: &Run, chains: &[GroupChain]) -> Digest {
    let i = &run.info;
    digest::run_digest(
        &i.rules_version,
        &i.config_json,
        &i.dataset_json,
        &i.search_json,
        i.start_time_s,
        chains,
    )
}
