//! The reviewer's recount: every epoch's training and validation operations recomputed
//! from its model's recorded architecture, its images and its optimizer steps, with the
//! runtime's own counter (`aiperf-ir`, docs/design.md §4). A row whose recorded counts differ is
//! named; the verdict makes the run INVALID.

use std::collections::BTreeMap;

use aiperf_ir::arch::Graph;
use aiperf_ir::ops::OpCount;

use crate::consistency::Found;
use crate::reader::Run;
use crate::schema::group_file;

/// What the recount found wrong, one line each (empty: every row agrees): each model
/// whose architecture is missing or unreadable once, then the differing rows.
pub fn recount(run: &Run) -> Vec<String> {
    let mut counts: BTreeMap<u64, Result<OpCount, String>> = BTreeMap::new();
    let mut unreadable: BTreeMap<u64, (String, usize)> = BTreeMap::new();
    let mut rows = Found::default();
    for g in &run.groups {
        for (row, e) in g.epochs.iter().enumerate() {
            let count = counts
                .entry(e.model_id)
                .or_insert_with(|| count_of(run, e.model_id));
            let c = match count {
                Ok(c) => c,
                Err(why) => {
                    unreadable.entry(e.model_id).or_insert((why.clone(), 0)).1 += 1;
                    continue;
                }
            };
            let Some(problem) = differs(c, e) else {
                continue;
            };
            rows.push(format!(
                "{} epochs row {row} (model {}, epoch {}): {problem}",
                group_file(g.group),
                e.model_id,
                e.epoch
            ));
        }
    }
    let mut problems: Vec<String> = unreadable
        .into_iter()
        .map(|(m, (why, n))| {
            format!("model {m}: {why}: the operations of its {n} epoch row(s) cannot be recomputed")
        })
        .collect();
    problems.extend(rows.finish("epoch rows whose operations differ"));
    problems
}

/// The op count of model `id` from its recorded architecture.
fn count_of(run: &Run, id: u64) -> Result<OpCount, String> {
    let json = run
        .architectures
        .get(&id)
        .ok_or_else(|| "no recorded architecture".to_string())?;
    let graph = Graph::from_json(json).map_err(|e| format!("recorded architecture: {e}"))?;
    OpCount::of(&graph).map_err(|e| format!("recorded architecture: {e}"))
}

/// How a row's recorded counts differ from the recount, if they do.
fn differs(c: &OpCount, e: &crate::schema::EpochRow) -> Option<String> {
    let train = c.train_epoch(e.train_images, e.steps);
    let val = c.eval_epoch(e.val_images);
    let mut out = Vec::new();
    if u128::from(e.train_ops) != train {
        out.push(format!(
            "train_ops {} recorded, {train} recomputed",
            e.train_ops
        ));
    }
    if u128::from(e.val_ops) != val {
        out.push(format!("val_ops {} recorded, {val} recomputed", e.val_ops));
    }
    (!out.is_empty()).then(|| {
        format!(
            "{} from its architecture, {} images, {} steps and {} validation images",
            out.join(", "),
            e.train_images,
            e.steps,
            e.val_images
        )
    })
}
