//! The early steps against the epochs (rules `aiperf-rules-6`, docs/design.md §5): every trial
//! of a real run whose first epoch is recorded holds its first steps' global training losses
//! (`steps`, schema 7), numbered from 0 without a gap, finite, as many as the audit
//! compares — so that records without them cannot dodge the audit's early-step check.

use crate::reader::Run;
use crate::schema::{group_file, EARLY_STEPS};

use super::Found;

/// Every trial's early steps against its first epoch row (real runs of schema 7 and later).
pub(super) fn check(run: &Run, real: bool) -> Vec<String> {
    if !real || run.info.schema_version < 7 {
        return Vec::new();
    }
    let mut found = Found::default();
    for g in &run.groups {
        let file = group_file(g.group);
        let mut seen = Vec::new();
        for first in g.epochs.iter().filter(|e| e.epoch == 1) {
            if seen.contains(&first.model_id) {
                continue;
            }
            seen.push(first.model_id);
            let mut steps: Vec<_> = g
                .steps
                .iter()
                .filter(|s| s.model_id == first.model_id)
                .collect();
            steps.sort_by_key(|s| s.step);
            let want = first.steps.min(u64::from(EARLY_STEPS)) as usize;
            let numbered = steps.iter().enumerate().all(|(i, s)| s.step as usize == i);
            let finite = steps.iter().all(|s| s.train_loss.is_finite());
            if steps.len() < want || steps.len() > EARLY_STEPS as usize || !numbered || !finite {
                found.push(format!(
                    "{file} model {}: {} early step(s) recorded{}{}, its first epoch of {} steps needs steps 0 to {} ({EARLY_STEPS} at most): the audit compares them, so every trial records them",
                    first.model_id,
                    steps.len(),
                    if numbered { "" } else { ", not numbered 0, 1, 2, …" },
                    if finite { "" } else { ", some not finite" },
                    first.steps,
                    want.saturating_sub(1)
                ));
            }
        }
    }
    found.finish("trials whose early steps are wrong")
}
