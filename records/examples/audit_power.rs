//! What a statistical audit's settings buy: reads one `audit.h5` recorded with generous
//! settings (many re-trainings, several epochs per drawn trial) and judges it again as if it
//! had been recorded with fewer — the first `k` re-trainings of each epoch, the drawn trials'
//! first `E` epochs (the best trial keeps its epochs, as the audit does) — printing for each
//! setting the power per value kind and the re-training it costs (epochs trained).
//!
//! `cargo run --release -p aiperf-records --example audit_power -- results/<run>`
//! (`scripts/bench/bench-audit-power` records such an audit and runs this).

use std::collections::BTreeSet;
use std::path::PathBuf;

use aiperf_records::audit::{self, judge, Audit, Mode};

fn main() -> anyhow::Result<()> {
    let dir: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .ok_or_else(|| anyhow::anyhow!("usage: audit_power <results/run-folder>"))?;
    let record = audit::read(&dir, None)?
        .ok_or_else(|| anyhow::anyhow!("{}: no audit.h5 to judge", dir.display()))?;
    let full = record.audit;
    if full.mode != Mode::Statistical {
        anyhow::bail!(
            "{}: the audit is exact; power is a statistical audit's",
            dir.display()
        );
    }
    let run = aiperf_records::read_run(&dir)?;
    let best = audit::best_trial(&run).map(|(i, _)| run.trials[i].model_id);
    println!(
        "audit of {} (seeds {}, epochs {}, {} epochs compared); best trial model {best:?}",
        dir.display(),
        full.seeds,
        full.epochs,
        full.rows.len()
    );
    println!("seeds epochs  compared  epochs-trained  power: train_loss  val_loss  val_accuracy");
    for epochs in 1..=full.epochs {
        for seeds in 2..=full.seeds {
            let a = trimmed(&full, seeds, epochs, best);
            let j = judge(&a);
            let shift = |kind: &str| {
                (j.power.iter())
                    .find(|p| p.value == kind)
                    .map_or(f64::NAN, |p| p.shift)
            };
            println!(
                "{seeds:>5} {epochs:>6} {:>9} {:>15}  {:>18.5} {:>9.5} {:>13.5}",
                a.rows.len(),
                trained(&a) * seeds as usize,
                shift(judge::KINDS[0]),
                shift(judge::KINDS[1]),
                shift(judge::KINDS[2]),
            );
        }
    }
    Ok(())
}

/// `full` as if audited with `seeds` re-trainings and `epochs` epochs per drawn trial.
fn trimmed(full: &Audit, seeds: u32, epochs: u32, best: Option<u64>) -> Audit {
    let keep = |model: u64, epoch: u32| epoch <= epochs || Some(model) == best;
    Audit {
        seeds,
        epochs,
        rows: (full.rows.iter())
            .filter(|r| keep(r.model_id, r.epoch))
            .copied()
            .collect(),
        seed_rows: (full.seed_rows.iter())
            .filter(|s| s.index < seeds && keep(s.model_id, s.epoch))
            .copied()
            .collect(),
        ..full.clone()
    }
}

/// Epochs one re-training of every compared trial trains (each trial up to its last
/// compared epoch).
fn trained(a: &Audit) -> usize {
    let trials: BTreeSet<(u32, u64)> = a.rows.iter().map(|r| (r.group, r.model_id)).collect();
    (trials.iter())
        .map(|&(g, m)| {
            (a.rows.iter())
                .filter(|r| (r.group, r.model_id) == (g, m))
                .map(|r| r.epoch as usize)
                .max()
                .unwrap_or(0)
        })
        .sum()
}
