//! The time side of physical consistency: the end is the deadline; every group worked from
//! the start to the end (no long silence at either side that its own epochs cannot
//! explain); each epoch leaves room, since the group's previous row, for the compute,
//! exchange and data wait it records; and one architecture's throughput per accelerator
//! stays within a stated factor across its epochs.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Found;
use crate::reader::{GroupRecords, Run};
use crate::schema::{group_file, EpochRow};

/// The end time must be the deadline (start + configured duration) within this many
/// seconds: the primary records the deadline itself when the run reaches it.
pub const END_TOLERANCE_S: f64 = 1e-3;
/// A group's silence at the start (t0 to its first epoch) or at the end (its last epoch to
/// the end) may be at most this factor times the longest it otherwise took per epoch…
pub const GAP_FACTOR: f64 = 3.0;
/// …or this many seconds, whichever is more (start-up, a trial abandoned at the deadline).
pub const MIN_GAP_S: f64 = 600.0;
/// One architecture's images per second in its slowest epoch and its fastest may differ by
/// at most this factor (a shared machine's speed varies about 2×).
pub const MAX_THROUGHPUT_FACTOR: f64 = 10.0;
/// Clock slack allowed when an epoch's recorded time split is set against the time since
/// the group's previous row: this fraction…
const SPLIT_SLACK: f64 = 0.05;
/// …plus these seconds.
const SPLIT_SLACK_S: f64 = 1.0;

/// Seconds of `(from, to)` that fall outside the run's down times (between a stop and its
/// resumption).
fn up_time(resumes: &[(f64, f64)], from: f64, to: f64) -> f64 {
    let down: f64 = resumes
        .iter()
        .map(|&(stopped, resumed)| (resumed.min(to) - stopped.max(from)).max(0.0))
        .sum();
    to - from - down
}

/// Everything time says about `run`, whose recorded configuration is `config`.
pub fn check(run: &Run, config: &Value) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(end_is_deadline(run, config));
    let mut found = Found::default();
    let mut rates = Found::default();
    for g in &run.groups {
        gaps(run, g, &mut found);
        throughput(&run.info.resumes, g, &mut rates);
    }
    out.extend(found.finish("epoch rows whose times do not fit the work they record"));
    out.extend(rates.finish("models whose throughput varies too much"));
    out
}

/// The end against the deadline.
fn end_is_deadline(run: &Run, config: &Value) -> Option<String> {
    let i = &run.info;
    let end = i.end_time_s?;
    let Some(duration) = config.pointer("/preset/duration_s").and_then(Value::as_f64) else {
        return Some(
            "the recorded configuration has no preset.duration_s: the deadline is unknown".into(),
        );
    };
    let deadline = i.start_time_s + duration;
    ((end - deadline).abs() > END_TOLERANCE_S).then(|| {
        format!(
            "primary.h5 end_time_s is {end}, but the deadline (start {} + duration {duration} s) is {deadline}: the run was stopped early, or a time was altered",
            i.start_time_s
        )
    })
}

/// The seconds an epoch row records as spent (compute, exchange, data wait).
fn split(e: &EpochRow) -> f64 {
    e.compute_s + e.allreduce_s + e.data_wait_s
}

/// A group's silence at the start and the end, and each row's time split against the time
/// since the previous row.
fn gaps(run: &Run, g: &GroupRecords, found: &mut Found) {
    let i = &run.info;
    let file = group_file(g.group);
    let (Some(first), Some(last)) = (g.epochs.first(), g.epochs.last()) else {
        return;
    };
    let mut longest = split(first);
    for (row, w) in g.epochs.windows(2).enumerate() {
        let between = up_time(&i.resumes, w[0].time_s, w[1].time_s);
        longest = longest.max(between).max(split(&w[1]));
        if split(&w[1]) > between * (1.0 + SPLIT_SLACK) + SPLIT_SLACK_S {
            found.push(format!(
                "{file} epochs row {}: records {:.3} s of compute, exchange and data wait, but completed {between:.3} s after the group's previous row",
                row + 1,
                split(&w[1])
            ));
        }
    }
    let allowed = (GAP_FACTOR * longest).max(MIN_GAP_S);
    let head = up_time(&i.resumes, i.start_time_s, first.time_s);
    if head > allowed {
        found.push(format!(
            "{file} epochs row 0: the group's first epoch completed {head:.0} s after the run's start, more than {allowed:.0} s ({GAP_FACTOR}× its longest epoch, at least {MIN_GAP_S} s): the start time was altered"
        ));
    }
    if let Some(end) = i.end_time_s {
        let tail = up_time(&i.resumes, last.time_s, end);
        if tail > allowed {
            found.push(format!(
                "{file} epochs row {}: the group's last epoch completed {tail:.0} s before the run's end, more than {allowed:.0} s ({GAP_FACTOR}× its longest epoch, at least {MIN_GAP_S} s): the end time was altered",
                g.epochs.len() - 1
            ));
        }
    }
}

/// Per model: images per second between its consecutive epochs, slowest against fastest.
fn throughput(resumes: &[(f64, f64)], g: &GroupRecords, found: &mut Found) {
    let mut by_model: BTreeMap<u64, Vec<(usize, f64)>> = BTreeMap::new();
    for (row, w) in g.epochs.windows(2).enumerate() {
        let (a, b) = (&w[0], &w[1]);
        if a.model_id != b.model_id || b.epoch != a.epoch + 1 {
            continue;
        }
        let seconds = up_time(resumes, a.time_s, b.time_s);
        if seconds > 0.0 {
            let images = (b.train_images + b.val_images) as f64;
            by_model
                .entry(b.model_id)
                .or_default()
                .push((row + 1, images / seconds));
        }
    }
    for (model, rates) in by_model {
        let slow = rates.iter().min_by(|a, b| a.1.total_cmp(&b.1));
        let fast = rates.iter().max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(&(slow_row, s)), Some(&(fast_row, f))) = (slow, fast) {
            if f > MAX_THROUGHPUT_FACTOR * s {
                found.push(format!(
                    "{} model {model}: {f:.1} images/s in epochs row {fast_row} but {s:.1} in row {slow_row}, more than {MAX_THROUGHPUT_FACTOR}× apart on the same accelerators",
                    group_file(g.group)
                ));
            }
        }
    }
}
