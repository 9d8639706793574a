//! The score as people and programs read it: a text summary with the timeline, JSON, and CSV.

use std::fmt::Write;

use crate::score::{Score, Status};

pub use crate::units::si;

/// A bandwidth, or `-` when there is none (nothing exchanged, or no time measured).
pub fn rate(bytes_per_s: Option<f64>) -> String {
    bytes_per_s
        .filter(|v| v.is_finite())
        .map_or_else(|| "- B/s".into(), |v| format!("{}B/s", si(v)))
}

/// `" (1 failed, 2 cut by the run's end)"`, or nothing when every trial finished.
fn trial_outcomes(s: &Score) -> String {
    let parts: Vec<String> = [
        (s.trials_failed, "failed"),
        (s.trials_stopped, "cut by the run's end"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// The human summary: headline, stability, totals, split, records, verdict, timeline.
pub fn text(s: &Score) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "aiperf score: {}", s.run);
    let _ = writeln!(t, "  score (sustained)        {}OPS", si(s.ops_per_s));
    let _ = writeln!(t, "  regulated score          {}OPS", si(s.regulated));
    let _ = writeln!(
        t,
        "  per accelerator ({:>3})    {}OPS, regulated {}OPS",
        s.accelerators,
        si(s.ops_per_s_per_accelerator),
        si(s.regulated_per_accelerator)
    );
    let _ = writeln!(
        t,
        "  per node ({:>3})           {}OPS, regulated {}OPS",
        s.nodes,
        si(s.ops_per_s_per_node),
        si(s.regulated_per_node)
    );
    write_efficiency(&mut t, s);
    write_stability(&mut t, s);
    let _ = writeln!(
        t,
        "  duration                 {:.1} s ({:.2} h)",
        s.duration_s,
        s.duration_s / 3600.0
    );
    if s.resumes > 0 {
        let _ = writeln!(
            t,
            "  resumed                  {} time(s): {:.1} s of down time counted as wall time",
            s.resumes, s.down_time_s
        );
    }
    let _ = writeln!(
        t,
        "  best accuracy            {:.4} (error {:.2}%)",
        s.best_accuracy,
        100.0 * (1.0 - s.best_accuracy)
    );
    let _ = writeln!(
        t,
        "  trials / epochs          {} / {}{}",
        s.trials,
        s.epochs,
        trial_outcomes(s)
    );
    let _ = writeln!(
        t,
        "  operations               train {} + validation {}",
        si(s.train_ops as f64),
        si(s.val_ops as f64)
    );
    write_split(&mut t, s);
    write_resources(&mut t, s);
    write_verdict(&mut t, s);
    write_timeline(&mut t, s);
    t
}

/// The efficiency line of [`text`]: the sustained OPS against the measured ceiling.
fn write_efficiency(t: &mut String, s: &Score) {
    let line = match (&s.ceilings, s.efficiency) {
        (Some(c), Some(e)) => {
            let own = match s.ceiling_run_precision {
                Some(r) => format!(
                    "; in the run's {} {}OPS, {:.1}% of it",
                    s.precision,
                    si(r),
                    100.0 * s.ops_per_s / r
                ),
                None => String::new(),
            };
            format!(
                "{:.1}% of the machine's measured ceiling, {}OPS (each accelerator's fastest precision){own} ({})",
                100.0 * e,
                si(crate::ceiling::total(c)),
                crate::ceiling::describe(c)
            )
        }
        (Some(c), None) => format!(
            "undefined: ceilings recorded for {} accelerator(s) of {}",
            crate::ceiling::ranks(c).len(),
            s.accelerators
        ),
        (None, _) => "not measured (records before schema 5 hold no ceiling)".into(),
    };
    let _ = writeln!(t, "  efficiency               {line}");
}

/// The stability lines of [`text`]: warm-up end, steady-state OPS, convergence.
fn write_stability(t: &mut String, s: &Score) {
    let st = &s.stability;
    match (st.warmup_end_s, st.steady_ops_per_s) {
        (Some(tw), Some(steady)) => {
            let _ = writeln!(
                t,
                "  steady state             {}OPS after the warm-up ended at {tw:.1} s",
                si(steady)
            );
        }
        (Some(tw), None) => {
            let _ = writeln!(
                t,
                "  steady state             none: the warm-up ended at {tw:.1} s, at the run's end"
            );
        }
        _ => {
            let _ = writeln!(
                t,
                "  steady state             undefined: group(s) {:?} never finished their 3 warm-up trials",
                st.groups_in_warmup
            );
        }
    }
    let verdict = match (st.converged, st.ops_per_s_window_before) {
        (Some(c), Some(before)) => format!(
            "{}: OPS {} → {}OPS over the last {:.0} s ({:+.2}%, tolerance ±2%)",
            if c { "yes" } else { "no" },
            si(before).trim_end(),
            si(s.ops_per_s),
            st.window_s,
            100.0 * (s.ops_per_s - before) / s.ops_per_s.max(f64::MIN_POSITIVE)
        ),
        _ => format!(
            "untested: the run is no longer than the {:.0} s window (or did no work)",
            st.window_s
        ),
    };
    let _ = writeln!(t, "  converged                {verdict}");
}

/// The time split and the exchange lines of [`text`].
fn write_split(t: &mut String, s: &Score) {
    let busy = s.compute_s + s.allreduce_s + s.data_wait_s;
    let pct = |v: f64| if busy > 0.0 { 100.0 * v / busy } else { 0.0 };
    let _ = writeln!(
        t,
        "  time split               compute {:.1}% / all-reduce {:.1}% / data wait {:.1}%",
        pct(s.compute_s),
        pct(s.allreduce_s),
        pct(s.data_wait_s)
    );
    let _ = writeln!(
        t,
        "  accelerators busy        {:.1}% of the run (train/eval steps and exchanges, per group)",
        100.0 * s.busy_fraction
    );
    let _ = writeln!(
        t,
        "  all-reduce               {}B in {:.1} s ({} per rank)",
        si(s.allreduce_bytes as f64),
        s.allreduce_s,
        rate(s.allreduce_bytes_per_s)
    );
    if let Some((lo, mid, hi)) = s.allreduce_epoch_bytes_per_s {
        let _ = writeln!(
            t,
            "  exchange per epoch       {}B/s median (min {}B/s, max {}B/s) per rank",
            si(mid),
            si(lo),
            si(hi)
        );
    }
}

/// The monitor's lines of [`text`]: accelerator utilisation and memory (NVML), host CPU and
/// memory.
fn write_resources(t: &mut String, s: &Score) {
    let r = &s.resources;
    if r.samples == 0 {
        let _ = writeln!(t, "  monitor                  no samples within the run");
        return;
    }
    let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.1}%", 100.0 * v));
    let bytes = |v: Option<f64>| v.map_or("-".into(), |v| format!("{}B", si(v)));
    if r.accel_samples == 0 {
        let _ = writeln!(
            t,
            "  accelerator use          not monitored (no NVML sample among {})",
            r.samples
        );
    } else {
        let _ = writeln!(
            t,
            "  accelerator use          {} utilised (NVML, mean of {} samples; max {}), memory peak {}",
            pct(r.accel_util_mean),
            r.accel_samples,
            pct(r.accel_util_max),
            bytes(r.accel_mem_peak_bytes)
        );
    }
    let _ = writeln!(
        t,
        "  host                     CPU {} (mean of {} samples), memory peak {}",
        pct(r.cpu_util_mean),
        r.samples,
        bytes(r.host_mem_peak_bytes)
    );
}

/// The records' integrity line, e.g. `intact (run digest 3fa2…)`.
pub fn records_line(s: &Score) -> String {
    let i = &s.integrity;
    let digest = i.run_digest.as_deref().unwrap_or("none");
    let given = match i.digest_matches {
        Some(true) => ", matches --digest",
        Some(false) => ", does NOT match --digest",
        None => "",
    };
    match i.records {
        "intact" => format!("intact (run digest {digest}{given})"),
        "incomplete" => {
            let why: Vec<&str> = i
                .notes
                .iter()
                .filter(|n| n.starts_with("no run digest") || n.contains("is missing"))
                .map(|n| n.split(':').next().unwrap_or(n))
                .collect();
            format!("incomplete: what is present is intact; {}", why.join("; "))
        }
        "unverifiable" => "unverifiable (schema 1 or 2: not sealed as schema 3 requires)".into(),
        other => {
            let given = match i.digest_matches {
                Some(true) => {
                    "; primary.h5's run digest matches --digest, the rows do not follow it"
                }
                Some(false) => "; primary.h5's run digest does NOT match --digest",
                None => "",
            };
            format!("{} (see the verdict{given})", other.to_uppercase())
        }
    }
}

/// The records and verdict lines of [`text`], then the warnings.
fn write_verdict(t: &mut String, s: &Score) {
    write_platform(t, s);
    let _ = writeln!(t, "  records                  {}", records_line(s));
    let status = match s.verdict.status {
        Status::Valid => "VALID",
        Status::Unofficial => "UNOFFICIAL",
        Status::Invalid => "INVALID",
    };
    let _ = writeln!(t, "  verdict ({})   {status}", s.verdict.rules);
    for r in &s.verdict.reasons {
        let _ = writeln!(t, "    - {r}");
    }
    write_audit(t, s);
    for w in &s.warnings {
        let _ = writeln!(t, "  warning: {w}");
    }
}

/// The timeline table of [`text`].
fn write_timeline(t: &mut String, s: &Score) {
    let _ = writeln!(t, "  timeline (grid {} s):", s.interval_s);
    let _ = writeln!(
        t,
        "  {:>10}  {:>8}  {:>14}  {:>14}",
        "elapsed s", "error %", "OPS", "regulated"
    );
    for p in &s.timeline {
        let _ = writeln!(
            t,
            "  {:>10.1}  {:>8.2}  {:>14}  {:>14}",
            p.elapsed_s,
            100.0 * p.error,
            si(p.ops_per_s),
            si(p.regulated)
        );
    }
}

/// The weak-scaling table: runs by accelerator count, with the per-accelerator and
/// per-node scores, the per-accelerator efficiency relative to the smallest run, the
/// steady-state OPS and convergence.
pub fn scaling(scores: &[Score]) -> String {
    let mut rows: Vec<&Score> = scores.iter().collect();
    rows.sort_by_key(|s| (s.accelerators, s.nodes));
    let base = rows.first().map_or(0.0, |s| s.ops_per_s_per_accelerator);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:>12}  {:>5}  {:>14}  {:>16}  {:>14}  {:>10}  {:>14}  {:>9}  {:>10}  run",
        "accelerators",
        "nodes",
        "score (OPS)",
        "per accelerator",
        "per node",
        "efficiency",
        "steady (OPS)",
        "converged",
        "verdict"
    );
    for s in rows {
        let eff = if base > 0.0 {
            s.ops_per_s_per_accelerator / base
        } else {
            0.0
        };
        let steady = s.stability.steady_ops_per_s.map_or("-".into(), si);
        let converged = s
            .stability
            .converged
            .map_or("-", |c| if c { "yes" } else { "no" });
        let _ = writeln!(
            t,
            "{:>12}  {:>5}  {:>14}  {:>16}  {:>14}  {:>9.1}%  {:>14}  {:>9}  {:>10}  {}",
            s.accelerators,
            s.nodes,
            si(s.ops_per_s),
            si(s.ops_per_s_per_accelerator),
            si(s.ops_per_s_per_node),
            100.0 * eff,
            steady,
            converged,
            format!("{:?}", s.verdict.status).to_uppercase(),
            s.run
        );
    }
    t
}

/// The timeline as CSV (one row per grid point), each row with the run's per-node score
/// and stability figures (empty where undefined).
pub fn csv(s: &Score) -> String {
    let mut t = String::from(
        "run,elapsed_s,ops,ops_per_s,error,regulated,nodes,ops_per_s_per_node,warmup_end_s,steady_ops_per_s,converged\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    let st = &s.stability;
    let tail = format!(
        "{},{},{},{},{}",
        s.nodes,
        s.ops_per_s_per_node,
        opt(st.warmup_end_s),
        opt(st.steady_ops_per_s),
        st.converged.map_or(String::new(), |c| c.to_string())
    );
    for p in &s.timeline {
        let _ = writeln!(
            t,
            "{},{},{},{},{},{},{tail}",
            s.run, p.elapsed_s, p.ops, p.ops_per_s, p.error, p.regulated
        );
    }
    t
}

/// The platform lines: one per distinct fingerprint, or why none is known.
fn write_platform(t: &mut String, s: &Score) {
    match &s.platform {
        None => {
            let _ = writeln!(
                t,
                "  platform                 unknown (records of schema 3 and older do not name it)"
            );
        }
        Some(entries) => {
            for e in entries {
                let _ = writeln!(
                    t,
                    "  platform                 ranks {:?} on {}: {}",
                    e.ranks,
                    e.hosts.join(", "),
                    e.fingerprint.summary()
                );
            }
        }
    }
}

/// The power line of a statistical audit: the smallest uniform shifts it would have caught.
pub fn power_line(power: &[crate::audit::judge::Power]) -> String {
    let part = |p: &crate::audit::judge::Power| {
        let sign = if p.value == "val_accuracy" {
            "+"
        } else {
            "−"
        };
        format!("{} {sign}{:.4}", p.value, p.shift)
    };
    format!(
        "would have caught a uniform shift of {}",
        power.iter().map(part).collect::<Vec<_>>().join(", ")
    )
}

/// The early steps' line of an audit: how many were compared and how close they came.
pub fn steps_line(s: &crate::audit::judge::Steps) -> String {
    if s.compared == 0 {
        return "none compared (records from schema 7 hold them, and each trial's are compared when the audit re-trains it on its group's rank count)".into();
    }
    if s.tolerance == 0.0 {
        return format!(
            "{} step(s) of {} trial(s), bit-identical required; largest relative gap {:.2e}",
            s.compared, s.trials, s.largest_gap
        );
    }
    format!(
        "{} step(s) of {} trial(s); largest relative gap of a judged step (the first {} of each trial) {:.2e}, tolerance {:.0e}",
        s.compared, s.trials, crate::audit::judge::STEPS_JUDGED, s.largest_gap, s.tolerance
    )
}

/// The audit lines of [`text`]: its verdict, whether it is verified, mode, power, failures.
fn write_audit(t: &mut String, s: &Score) {
    let Some(a) = &s.audit else {
        return;
    };
    let proof = if a.verified {
        "verified by its audit digest"
    } else if a.checked {
        "NOT the audit whose digest was given"
    } else {
        "unverified: an audit proves something only to whoever ran it; give its digest with --audit-digest"
    };
    let _ = writeln!(
        t,
        "  audit                    {} ({} trial(s), {} epoch(s) re-trained, {} mode; {proof})",
        a.verdict, a.trials, a.epochs, a.mode
    );
    if !a.mode_reason.is_empty() {
        let _ = writeln!(t, "    - mode: {}", a.mode_reason);
    }
    if a.mode == "statistical" && !a.power.is_empty() {
        let _ = writeln!(
            t,
            "    - {} re-trainings per epoch, family-wise α = {}; {}",
            a.seeds,
            a.alpha,
            power_line(&a.power)
        );
    }
    if !a.mode.is_empty() {
        let _ = writeln!(t, "    - early steps: {}", steps_line(&a.steps));
    }
    for line in a.problems.iter().chain(&a.failures) {
        let _ = writeln!(t, "    - {line}");
    }
}

/// `aiperf audit`'s table: its mode and why, every compared value beside the re-trainings,
/// the power, then the verdict.
pub fn audit_text(a: &crate::audit::Audit, j: &crate::audit::Judgement) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "aiperf audit: {} trial(s) of the run with digest {}; draw {:#018x}, sample seed {:#018x}",
        a.trials, a.run_digest, a.draw, a.sample_seed
    );
    let _ = writeln!(
        t,
        "  mode                     {} ({})",
        a.mode.as_str(),
        a.mode_reason
    );
    if a.mode == crate::audit::Mode::Statistical {
        let _ = writeln!(
            t,
            "  statistic                {} re-trainings per epoch; family-wise α = {} (half over {} values, each against its epoch's stratum, one-sided: better than the re-trainings; half over the combined tests); critical z up to {:.3}",
            a.seeds,
            a.alpha,
            j.findings.len(),
            j.critical
        );
    }
    let _ = writeln!(
        t,
        "  group    model  epoch  value          recorded     re-trained        scale   better z  agrees"
    );
    for f in &j.findings {
        let _ = writeln!(
            t,
            "  {:>5} {:>8} {:>6}  {:<12} {:>10.6} {:>14.6} {:>12.6} {:>8.2}  {}",
            f.group,
            f.model_id,
            f.epoch,
            f.value,
            f.recorded,
            f.mean,
            f.scale,
            f.z,
            if f.agrees { "yes" } else { "NO" }
        );
    }
    if a.mode == crate::audit::Mode::Statistical {
        let _ = writeln!(t, "  power                    {}", power_line(&j.power));
        for p in &j.power {
            let _ = writeln!(
                t,
                "    {:<12} combined: better by {:+.6} ± {:.6} (critical z {:.2}), {} degrees of freedom over the strata",
                p.value, p.combined, p.combined_se, p.combined_critical, p.df
            );
        }
    }
    let _ = writeln!(t, "  early steps              {}", steps_line(&j.steps));
    for f in &j.failures {
        let _ = writeln!(t, "  - {f}");
    }
    let _ = writeln!(t, "  verdict                  {}", j.verdict);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn si_prefixes() {
        assert_eq!(si(1.5e15), "1.500 P");
        assert_eq!(si(999.0), "999.000 ");
        assert_eq!(si(2.0e9), "2.000 G");
    }
}
