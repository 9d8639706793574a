//! `aiperf run --resume`: what the primary recovers from a stopped or crashed run's records
//! — the trained models (history and search tree), every registered architecture
//! (de-duplication), each group's round, the TPE observations, the hyperparameters of
//! finished models (warm-up rounds reuse their father's) and the status totals — and when
//! the run stopped. A pure function of the records, tested without MPI.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use aiperf_records::schema::TpeRow;
use aiperf_records::Run;

use super::Totals;
use crate::arch::{Descriptor, Graph};
use crate::search::Hparams;
use crate::world::protocol::HistoryEntry;

/// Why a stopped run's records cannot be taken over.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The records could not be read.
    #[error(transparent)]
    Records(#[from] aiperf_records::RecordError),
    /// The records contradict themselves or the resumed layout.
    #[error("{dir}: {problem}")]
    Inconsistent {
        /// The records folder.
        dir: String,
        /// What is wrong.
        problem: String,
    },
}

/// A stopped run's state, as the primary takes it over.
#[derive(Clone, Debug, Default)]
pub struct Resumed {
    /// Trained models, in the order they finished.
    pub history: Vec<HistoryEntry>,
    /// Descriptors of every registered architecture.
    pub seen: HashSet<Descriptor>,
    /// The next global model id.
    pub next_id: u64,
    /// Trials finished per group.
    pub rounds: Vec<u32>,
    /// TPE observations (hyperparameters, loss), in arrival order.
    pub tpe: Vec<(Hparams, f64)>,
    /// Hyperparameters of every model with a recorded trial.
    pub hparams: HashMap<u64, Hparams>,
    /// Epochs, operations and best accuracy recorded so far.
    pub totals: Totals,
    /// The time of the last record (when the run stopped), on the common clock.
    pub stopped_s: f64,
}

/// Rebuilds the state from a run's records: `run` (trials and epochs), its architectures
/// (model id → JSON) and TPE rows; `groups` is the resumed layout's group count.
pub fn from_records(
    dir: &Path,
    run: &Run,
    architectures: Vec<(u64, String)>,
    tpe: &[TpeRow],
    groups: usize,
) -> Result<Resumed, ResumeError> {
    let bad = |problem: String| ResumeError::Inconsistent {
        dir: dir.display().to_string(),
        problem,
    };
    let mut graphs = HashMap::new();
    let mut r = Resumed {
        rounds: vec![0; groups],
        ..Resumed::default()
    };
    for (id, json) in architectures {
        let g = Graph::from_json(&json).map_err(|e| bad(format!("architecture {id}: {e}")))?;
        r.seen.insert(g.descriptor());
        graphs.insert(id, g);
        r.next_id = r.next_id.max(id.saturating_add(1));
    }
    for t in &run.trials {
        let round = r.rounds.get_mut(t.group as usize).ok_or_else(|| {
            bad(format!(
                "a trial of group {} but the layout has {groups} groups",
                t.group
            ))
        })?;
        *round += 1;
        let h = Hparams {
            batch_size: t.batch_size,
            kernel_size: t.kernel_size,
        };
        r.hparams.insert(t.model_id, h);
        if t.epochs > 0 {
            let graph = graphs.get(&t.model_id).cloned().ok_or_else(|| {
                bad(format!(
                    "trial of model {} has no recorded architecture",
                    t.model_id
                ))
            })?;
            r.history.push(HistoryEntry {
                model_id: t.model_id,
                father: u64::try_from(t.father).ok(),
                graph: std::sync::Arc::new(graph),
                accuracy: t.reported_accuracy,
                position: r.history.len() as u64,
            });
        }
    }
    for e in run.groups.iter().flat_map(|g| &g.epochs) {
        r.totals.epochs += 1;
        r.totals.ops += u128::from(e.train_ops) + u128::from(e.val_ops);
        r.totals.best = r.totals.best.max(e.val_accuracy);
    }
    r.tpe = tpe
        .iter()
        .map(|t| {
            let h = Hparams {
                batch_size: t.batch_size,
                kernel_size: t.kernel_size,
            };
            (h, t.loss)
        })
        .collect();
    r.stopped_s = run
        .groups
        .iter()
        .flat_map(|g| g.epochs.iter().map(|e| e.time_s))
        .chain(run.trials.iter().map(|t| t.end_s))
        .chain(tpe.iter().map(|t| t.time_s))
        .chain(run.info.end_time_s)
        .fold(run.info.start_time_s, f64::max);
    Ok(r)
}

/// Reads the records folder and rebuilds the state.
pub fn read(dir: &Path, groups: usize) -> Result<Resumed, ResumeError> {
    let run = aiperf_records::read_run(dir)?;
    let archs = aiperf_records::read_architectures(dir)?;
    let tpe = aiperf_records::read_tpe(dir)?;
    from_records(dir, &run, archs, &tpe, groups)
}
