//! Physical consistency (rules `aiperf-rules-6`, docs/design.md §5): the records checked against
//! themselves, without any digest, so that a record set written from the documentation
//! alone is refused unless it describes work that fits together — architectures that take
//! the dataset's input and classes and grow from the configured start architecture (which
//! is rebuilt here by the IR crate, not compared by name), epochs whose images and steps
//! follow from the configuration, the split and the trial's batch size, accelerators that
//! match the group files and the devices, an end time that is the deadline, trial rows that
//! agree with their epoch rows, and epoch times that leave room for the recorded work.
//! Each failure names the row; any makes the run INVALID.

mod physics;
mod steps;
mod time;

use std::collections::BTreeMap;

use aiperf_ir::arch::{by_name, Graph, Shape};
use aiperf_ir::ops::OpCount;
use serde_json::Value;

use crate::reader::{GroupRecords, Run};
use crate::rules::DatasetIdentity;
use crate::schema::{group_file, EpochRow, TrialRow};

pub use time::{END_TOLERANCE_S, GAP_FACTOR, MAX_THROUGHPUT_FACTOR, MIN_GAP_S};

/// At most this many problems of one kind are named; the rest are counted.
const NAMED: usize = 5;

/// Problems of one kind: the first [`NAMED`] in full, then a count (also the recount's).
#[derive(Default)]
pub(crate) struct Found {
    lines: Vec<String>,
    more: usize,
}

impl Found {
    pub(crate) fn push(&mut self, line: String) {
        if self.lines.len() < NAMED {
            self.lines.push(line);
        } else {
            self.more += 1;
        }
    }

    pub(crate) fn finish(mut self, what: &str) -> Vec<String> {
        if self.more > 0 {
            self.lines.push(format!("and {} more {what}", self.more));
        }
        self.lines
    }
}

/// What the run's configuration and dataset say, parsed once.
struct Setting {
    config: Value,
    dataset: Option<DatasetIdentity>,
}

impl Setting {
    fn of(run: &Run) -> Setting {
        Setting {
            config: serde_json::from_str(&run.info.config_json).unwrap_or(Value::Null),
            dataset: serde_json::from_str(&run.info.dataset_json).ok(),
        }
    }

    fn trainer(&self) -> Option<&str> {
        self.config.pointer("/trainer").and_then(Value::as_str)
    }

    /// Images per epoch the configuration asks for of a split of `split` images.
    fn images(&self, key: &str, split: u64) -> u64 {
        self.config
            .pointer(&format!("/preset/train/{key}"))
            .and_then(Value::as_u64)
            .map_or(split, |n| n.min(split))
    }
}

/// Every consistency problem of `run`, one line each (empty: consistent). `ops_per_s` is
/// the score (sustained OPS at the run's end), held against the recorded ceilings.
pub fn check(run: &Run, ops_per_s: f64) -> Vec<String> {
    let s = Setting::of(run);
    let mut out = Vec::new();
    let Some(dataset) = &s.dataset else {
        out.push("primary.h5 dataset_identity is not a dataset identity: nothing can be checked against the dataset".into());
        return out;
    };
    architectures(run, &s, dataset, &mut out);
    out.extend(accelerators(run, &s));
    let trials = trial_index(run);
    out.extend(epochs(run, &s, dataset, &trials));
    out.extend(trials_agree(run, &trials));
    out.extend(time::check(run, &s.config));
    let real = s.trainer() == Some("real");
    out.extend(steps::check(run, real));
    out.extend(physics::check(run, real, ops_per_s));
    out
}

/// Each recorded architecture against the dataset's input and classes and the start
/// architecture; problems pushed to `out`.
fn architectures(run: &Run, s: &Setting, d: &DatasetIdentity, out: &mut Vec<String>) {
    let [h, w, c] = d.input;
    let input = Shape::new(c, h, w);
    let start_name = s.config.pointer("/preset/start").and_then(Value::as_str);
    let start = start_name.and_then(|n| by_name(n, input, d.classes));
    let start_count = start.as_ref().and_then(|g| OpCount::of(g).ok());
    if start.is_none() {
        out.push(format!(
            "the configured start architecture {start_name:?} cannot be built for the dataset's input {h}×{w}×{c} and {} classes",
            d.classes
        ));
    }
    let mut found = Found::default();
    let mut start_seen = false;
    for (row, (id, json)) in run.architecture_rows.iter().enumerate() {
        let at = format!("primary.h5 architectures row {row} (model {id})");
        let Ok(graph) = Graph::from_json(json) else {
            continue; // the recount names unreadable architectures
        };
        let shape = graph.input_shape();
        if (shape.c, shape.h, shape.w) != (c, h, w) || graph.num_classes() != d.classes {
            found.push(format!(
                "{at}: takes {}×{}×{} inputs with {} classes, but the dataset has {h}×{w}×{c} and {}",
                shape.h,
                shape.w,
                shape.c,
                graph.num_classes(),
                d.classes
            ));
        }
        start_seen |= start
            .as_ref()
            .is_some_and(|g| g.to_json() == graph.to_json());
        let Ok(count) = OpCount::of(&graph) else {
            continue;
        };
        if let Some(sc) = &start_count {
            if count.fp_per_image < sc.fp_per_image || count.params < sc.params {
                found.push(format!(
                    "{at}: {} forward operations per image and {} parameters, fewer than the start architecture's {} and {}: morphisms only grow a network",
                    count.fp_per_image, count.params, sc.fp_per_image, sc.params
                ));
            }
        }
    }
    out.extend(found.finish("architectures that do not fit the dataset or the start"));
    if start.is_some() && !run.architecture_rows.is_empty() && !start_seen {
        out.push(format!(
            "no recorded architecture is the configured start architecture {} (rebuilt for the dataset): the search did not start from it",
            start_name.unwrap_or("?")
        ));
    }
}

/// `accelerators` against the group files' ranks and the devices; a real-trainer run's
/// devices must be real.
fn accelerators(run: &Run, s: &Setting) -> Vec<String> {
    let i = &run.info;
    let mut out = Vec::new();
    let ranks: u32 = run.groups.iter().map(|g| g.ranks).sum();
    if run.missing.is_empty() && ranks != i.accelerators {
        out.push(format!(
            "primary.h5 accelerators is {}, but the group files hold {ranks} ranks",
            i.accelerators
        ));
    }
    let trainers: Vec<&String> = i.devices.iter().filter(|d| *d != "primary").collect();
    if trainers.len() != i.accelerators as usize
        || i.devices.first().map(String::as_str) != Some("primary")
    {
        out.push(format!(
            "primary.h5 accelerators is {}, but devices lists {} training devices after the primary: {:?}",
            i.accelerators,
            trainers.len(),
            i.devices
        ));
    }
    if s.trainer() == Some("real") {
        if let Some(d) = trainers
            .iter()
            .find(|d| !(d.starts_with("cpu") || d.starts_with("cuda")))
        {
            out.push(format!(
                "the trainer is real, but devices lists {d:?}: a real run trains on cpu or cuda devices"
            ));
        }
    }
    out
}

/// Each trial row by (group, model id).
fn trial_index(run: &Run) -> BTreeMap<(u32, u64), (usize, &TrialRow)> {
    run.trials
        .iter()
        .enumerate()
        .map(|(i, t)| ((t.group, t.model_id), (i, t)))
        .collect()
}

/// What an epoch's images and steps must be: `(images, steps)` for the real trainer (whole
/// global batches, `drop_last`) or a stand-in (the configured images, ceil of batches).
fn expected_train(real: bool, n: u64, global: u64) -> (u64, u64) {
    if real {
        (n / global * global, n / global)
    } else {
        (n, n.div_ceil(global))
    }
}

/// Every epoch row's images and steps against the configuration, the split and its trial's
/// batch size over the group's ranks; every row's model must have a trial row.
fn epochs(
    run: &Run,
    s: &Setting,
    d: &DatasetIdentity,
    trials: &BTreeMap<(u32, u64), (usize, &TrialRow)>,
) -> Vec<String> {
    let real = s.trainer() == Some("real");
    let fp16 = s
        .config
        .pointer("/preset/train/precision")
        .and_then(Value::as_str)
        == Some("fp16");
    let n_train = s.images("train_images", d.train_images);
    let n_val = s.images("val_images", d.val_images);
    let mut found = Found::default();
    for g in &run.groups {
        for (row, e) in g.epochs.iter().enumerate() {
            let at = || {
                format!(
                    "{} epochs row {row} (model {}, epoch {})",
                    group_file(g.group),
                    e.model_id,
                    e.epoch
                )
            };
            let Some((_, t)) = trials.get(&(g.group, e.model_id)) else {
                found.push(format!(
                    "{}: no trial row of group {} trained model {}",
                    at(),
                    g.group,
                    e.model_id
                ));
                continue;
            };
            let global = u64::from(t.batch_size) * u64::from(g.ranks);
            if global == 0 {
                found.push(format!("{}: its trial's batch size is 0", at()));
                continue;
            }
            let (images, steps) = expected_train(real, n_train, global);
            let steps_ok = if real && fp16 {
                e.steps <= steps
            } else {
                e.steps == steps
            };
            if e.train_images != images || !steps_ok || e.val_images != n_val {
                found.push(format!(
                    "{}: {} training images in {} steps and {} validation images, but {n_train} images per epoch in global batches of {} (batch size {} × {} ranks) make {images} in {steps} steps, and the validation split gives {n_val}",
                    at(), e.train_images, e.steps, e.val_images, global, t.batch_size, g.ranks
                ));
            }
        }
    }
    found.finish("epoch rows whose images or steps do not follow")
}

/// A group's epoch rows of one model, in order.
fn rows_of(g: &GroupRecords, model: u64) -> Vec<&EpochRow> {
    g.epochs.iter().filter(|e| e.model_id == model).collect()
}

/// Every trial row against its group's epoch rows: the number of epochs, their numbering,
/// the trial (round) they name and the best accuracy.
fn trials_agree(run: &Run, trials: &BTreeMap<(u32, u64), (usize, &TrialRow)>) -> Vec<String> {
    let mut found = Found::default();
    for (&(group, model), &(i, t)) in trials {
        let Some(g) = run.groups.iter().find(|g| g.group == group) else {
            continue; // a missing group file is its own reason
        };
        let rows = rows_of(g, model);
        let at = format!("primary.h5 trials row {i} (group {group}, model {model})");
        let numbered = rows
            .iter()
            .enumerate()
            .all(|(k, e)| e.epoch as usize == k + 1);
        let same_trial = rows.iter().all(|e| e.trial == u64::from(t.round));
        let best = rows
            .iter()
            .map(|e| e.val_accuracy)
            .fold(f64::NEG_INFINITY, f64::max);
        if rows.len() != t.epochs as usize || !numbered || !same_trial {
            found.push(format!(
                "{at}: {} epochs of round {}, but {} holds {} rows of that model{}",
                t.epochs,
                t.round,
                group_file(group),
                rows.len(),
                if numbered && same_trial {
                    ""
                } else {
                    " not numbered 1, 2, … in that round"
                }
            ));
        } else if !rows.is_empty() && best != t.best_accuracy {
            found.push(format!(
                "{at}: best accuracy {}, but its epoch rows' best is {best}",
                t.best_accuracy
            ));
        }
    }
    found.finish("trial rows that disagree with their epoch rows")
}
