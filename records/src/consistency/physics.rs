//! What the machine could have done (rules `aiperf-rules-6`, docs/design.md §5): the recorded
//! ceilings against the recorded platform and precision, each host one processor, and the
//! score no faster than the ceilings. A run that claims more than its own measured machine
//! could compute, or ceilings from another machine than the one it names, is not a result.

use std::collections::BTreeMap;

use crate::ceiling::{self, Ceiling};
use crate::platform::{Fingerprint, PlatformEntry};
use crate::reader::Run;

/// Precisions a processor computes natively, as the run decides at start-up: fp32 always,
/// bf16 with AMX, AVX-512-BF16 or Arm's BF16, or where the recorded pins force it
/// (`AIPERF_NATIVE_BF16`, a test switch the platform records).
fn cpu_native(f: &Fingerprint) -> Vec<&'static str> {
    let has = |x: &str| f.cpu_features.iter().any(|g| g == x);
    let forced = f.pins.get("AIPERF_NATIVE_BF16").map(String::as_str);
    if forced == Some("1")
        || (forced.is_none()
            && (has("amx_bf16") || has("avx512_bf16") || (has("bf16") && has("asimd"))))
    {
        vec!["bf16", "fp32"]
    } else {
        vec!["fp32"]
    }
}

/// Every physical impossibility of `run`, one line each; `ops_per_s` is the score.
pub(super) fn check(run: &Run, real: bool, ops_per_s: f64) -> Vec<String> {
    let mut out = Vec::new();
    // Records that name no platform (before schema 4, or fixtures) leave nothing to check.
    let Some(entries) = run.info.platform.as_ref().filter(|e| !e.is_empty()) else {
        return out;
    };
    out.extend(one_processor_per_host(entries));
    if !real || run.info.schema_version < 5 {
        return out;
    }
    let Some(ceilings) = &run.info.ceilings else {
        out.push("primary.h5 holds no ceilings: a real run records each accelerator's measured ceiling (schema 5 and later)".into());
        return out;
    };
    if ceiling::ranks(ceilings).len() != run.info.accelerators as usize {
        out.push(format!(
            "primary.h5 ceilings: {} rank(s) measured, the run has {} accelerators: every training rank records its ceiling",
            ceiling::ranks(ceilings).len(),
            run.info.accelerators
        ));
        return out;
    }
    for c in ceilings {
        if let Some(line) = against_platform(c, entries, &run.info.precision) {
            out.push(line);
        }
    }
    if run.info.schema_version >= 6 {
        out.extend(native_sets(ceilings, entries));
    }
    if let Some(e) = ceiling::efficiency(ops_per_s, ceilings).filter(|&e| e > 1.0) {
        out.push(format!(
            "the score is {:.1}% of the machine's measured ceiling ({:.3e} OPS over {:.3e}): no run computes faster than its own accelerators' fastest matrix products",
            e * 100.0,
            ops_per_s,
            ceiling::total(ceilings)
        ));
    }
    out
}

/// A host named by two platform entries whose processors differ.
fn one_processor_per_host(entries: &[PlatformEntry]) -> Vec<String> {
    let mut seen: BTreeMap<&str, &Fingerprint> = BTreeMap::new();
    let mut out = Vec::new();
    for e in entries {
        for h in &e.hosts {
            let f = &e.fingerprint;
            match seen.get(h.as_str()) {
                Some(g)
                    if (&g.cpu_vendor, &g.cpu_model, &g.cpu_features)
                        != (&f.cpu_vendor, &f.cpu_model, &f.cpu_features) =>
                {
                    out.push(format!(
                        "primary.h5 platform: host {h} is recorded with two processors ({} {} and {} {}): one host has one processor",
                        g.cpu_vendor, g.cpu_model, f.cpu_vendor, f.cpu_model
                    ));
                }
                Some(_) => {}
                None => {
                    seen.insert(h, f);
                }
            }
        }
    }
    out
}

/// One ceiling against the platform entry of its rank: the same host, and on a CPU the same
/// threads and a precision the processor computes natively.
fn against_platform(c: &Ceiling, entries: &[PlatformEntry], precision: &str) -> Option<String> {
    let head = format!("primary.h5 ceilings, rank {} ({})", c.rank, c.precision);
    let Some(e) = entries.iter().find(|e| e.ranks.contains(&c.rank)) else {
        return Some(format!("{head}: the platform names no rank {}", c.rank));
    };
    if !e.hosts.contains(&c.host) {
        return Some(format!(
            "{head}: measured on host {}, but the platform puts rank {} on {}",
            c.host,
            c.rank,
            e.hosts.join(", ")
        ));
    }
    if c.device.starts_with("cpu") && c.threads != e.fingerprint.threads {
        return Some(format!(
            "{head}: measured with {} threads, the rank's platform records {}",
            c.threads, e.fingerprint.threads
        ));
    }
    if c.device.starts_with("cpu") {
        let native = cpu_native(&e.fingerprint);
        if !native.contains(&c.precision.as_str()) || !native.contains(&precision) {
            return Some(format!(
                "{head}: the run's processor ({} {}) computes {} natively, the records claim {} (run precision {precision})",
                e.fingerprint.cpu_vendor,
                e.fingerprint.cpu_model,
                native.join(" and "),
                c.precision
            ));
        }
    }
    None
}

/// Schema 6: each CPU rank measured every precision its processor computes natively.
fn native_sets(ceilings: &[Ceiling], entries: &[PlatformEntry]) -> Vec<String> {
    let mut out = Vec::new();
    for rank in ceiling::ranks(ceilings) {
        let mine: Vec<&Ceiling> = ceilings.iter().filter(|c| c.rank == rank).collect();
        let Some(e) = entries.iter().find(|e| e.ranks.contains(&rank)) else {
            continue;
        };
        if !mine.iter().all(|c| c.device.starts_with("cpu")) {
            continue;
        }
        let mut have: Vec<&str> = mine.iter().map(|c| c.precision.as_str()).collect();
        have.sort_unstable();
        let want = cpu_native(&e.fingerprint);
        if have != want {
            out.push(format!(
                "primary.h5 ceilings, rank {rank}: measured in {}, but its processor computes {} natively (each precision measured once)",
                have.join(", "),
                want.join(" and ")
            ));
        }
    }
    out
}
