//! `aiperf run` with the simulated trainer: the primary serves every group's requests over
//! MPI (registration with machine-wide de-duplication, TPE suggestions, progress, results
//! answered with history deltas) and records trials, architectures and TPE observations;
//! each group leader proposes architectures with the Bayesian optimiser from its history,
//! "trains" them with the simulated trial model, and records every completed epoch. At the
//! deadline the primary answers every request with Stop, and the run ends when every group
//! has said goodbye.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mpi::collective::Root;
use mpi::point_to_point::{Destination, Source};
use mpi::traits::Communicator;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use aiperf_records::schema::{EpochRow, TpeRow, TrialRow, TrialStatus};
use aiperf_records::writer::{GroupWriter, PrimaryWriter, RunMeta};

use super::layout::Layout;
use super::protocol::{decode, encode, HistoryEntry, ToGroup, ToPrimary, DEFAULT_LIMIT_BYTES};
use crate::arch::{Descriptor, Graph};
use crate::ops::OpCount;
use crate::search::{
    random_morphism, BayesConfig, BayesOptimizer, Hparams, Limits, Observed, Space, Tpe, TpeConfig,
};
use crate::train::schedule::{epoch_budget, EarlyStopping};
use crate::train::simulated::{SimDevice, SimTrial};

/// Settings of a simulated run.
#[derive(Clone, Debug)]
pub struct SimRunConfig {
    /// Where the records go.
    pub results: PathBuf,
    /// Wall-clock duration.
    pub duration: Duration,
    /// The start architecture.
    pub start: Graph,
    /// Its name (recorded).
    pub start_name: String,
    /// Declared accelerator.
    pub device: SimDevice,
    /// Training and validation images per epoch.
    pub images: (u64, u64),
    /// Full epoch budget.
    pub epochs: u32,
    /// Simulated seconds per wall-clock second.
    pub speedup: f64,
    /// Seed of everything.
    pub seed: u64,
    /// Threads of each leader's search pool.
    pub search_threads: usize,
    /// The resolved configuration, JSON, for the records.
    pub config_json: String,
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The primary's state.
struct Primary {
    writer: PrimaryWriter,
    tpe: Tpe,
    history: Vec<HistoryEntry>,
    seen: HashSet<Descriptor>,
    registered: Vec<(u64, Option<u64>, Graph, u32)>,
    synced: Vec<usize>,
    rounds: Vec<u32>,
    next_id: u64,
    start_of: std::collections::HashMap<u64, f64>,
}

/// Rank 0: serves requests until the deadline (or `interrupted`: SIGTERM/SIGINT) and every
/// group's goodbye. An interrupted run ends at the moment of the interruption.
pub fn primary<C: Communicator>(
    world: &C,
    layout: &Layout,
    cfg: &SimRunConfig,
    t0: f64,
    interrupted: &AtomicBool,
) -> Result<(), String> {
    let meta = RunMeta {
        program_version: env!("CARGO_PKG_VERSION").into(),
        config_json: cfg.config_json.clone(),
        start_time_s: t0,
        world_size: world.size() as u32,
        groups: layout.groups(),
        accelerators: (world.size() - 1) as u32,
        hosts: vec![],
        devices: vec![format!("simulated {:.3e} OPS", cfg.device.ops_per_s)],
        seed: cfg.seed,
        dataset: "synthetic".into(),
        start_architecture: cfg.start_name.clone(),
        precision: "simulated".into(),
        fixed_algorithms: true,
    };
    let mut p = Primary {
        writer: PrimaryWriter::create(&cfg.results, &meta).map_err(err)?,
        tpe: Tpe::new(
            TpeConfig {
                seed: cfg.seed,
                ..TpeConfig::default()
            },
            Space::default(),
        )?,
        history: Vec::new(),
        seen: HashSet::new(),
        registered: Vec::new(),
        synced: vec![0; layout.leaders.len()],
        rounds: vec![0; layout.leaders.len()],
        next_id: 0,
        start_of: Default::default(),
    };
    let deadline = t0 + cfg.duration.as_secs_f64();
    let mut end: Option<f64> = None;
    let mut byes = 0;
    while byes < layout.leaders.len() {
        let (bytes, status) = world.any_process().receive_vec::<u8>();
        let src = status.source_rank();
        let msg: ToPrimary =
            decode(&bytes, DEFAULT_LIMIT_BYTES).map_err(|e| format!("from rank {src}: {e}"))?;
        let now = now_s();
        let stopping = now >= deadline || interrupted.load(Ordering::Relaxed);
        if stopping && end.is_none() {
            end = Some(now.min(deadline));
        }
        let reply = match msg {
            ToPrimary::Hello { group, .. } => Some(p.delta(group)),
            ToPrimary::Register {
                father,
                graph,
                descriptor,
                group,
            } => Some(if stopping {
                ToGroup::Stop
            } else if !p.seen.insert(descriptor) {
                ToGroup::Duplicate
            } else {
                let id = p.next_id;
                p.next_id += 1;
                p.writer
                    .append_architecture(id, &graph.to_json())
                    .map_err(err)?;
                p.start_of.insert(id, now_s());
                p.registered.push((id, father, graph, group));
                ToGroup::Registered { model_id: id }
            }),
            ToPrimary::Suggest { .. } => Some(if stopping {
                ToGroup::Stop
            } else {
                ToGroup::Hparams(p.tpe.suggest())
            }),
            ToPrimary::Progress { .. } => Some(if stopping {
                ToGroup::Stop
            } else {
                ToGroup::Continue
            }),
            ToPrimary::Result {
                group,
                model_id,
                accuracy,
                reported,
                epochs,
                hparams,
            } => {
                p.record_result(
                    group, model_id, accuracy, reported, epochs, hparams, stopping,
                )?;
                Some(if stopping {
                    ToGroup::Stop
                } else {
                    p.delta(group)
                })
            }
            ToPrimary::Bye { .. } => {
                byes += 1;
                None
            }
        };
        if let Some(r) = reply {
            world.process_at_rank(src).send(&encode(&r)[..]);
        }
    }
    p.writer
        .finish(end.unwrap_or_else(now_s).min(now_s()))
        .map_err(err)
}

impl Primary {
    /// Models this group has not seen yet.
    fn delta(&mut self, group: u32) -> ToGroup {
        let g = group as usize;
        let out = self.history[self.synced[g]..].to_vec();
        self.synced[g] = self.history.len();
        ToGroup::History(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn record_result(
        &mut self,
        group: u32,
        id: u64,
        accuracy: f64,
        reported: f64,
        epochs: u32,
        h: Hparams,
        stopped: bool,
    ) -> Result<(), String> {
        let Some((_, father, graph, _)) = self.registered.iter().find(|r| r.0 == id).cloned()
        else {
            return Err(format!(
                "group {group} reported model {id}, which was never registered"
            ));
        };
        let t = now_s();
        let round = self.rounds[group as usize];
        self.rounds[group as usize] += 1;
        self.tpe.observe(h, 1.0 - reported);
        self.writer
            .append_tpe(&TpeRow {
                time_s: t,
                batch_size: h.batch_size,
                kernel_size: h.kernel_size,
                loss: 1.0 - reported,
            })
            .map_err(err)?;
        let row = TrialRow {
            model_id: id,
            father: father.map_or(-1, |f| f as i64),
            group,
            round,
            batch_size: h.batch_size,
            kernel_size: h.kernel_size,
            epochs,
            best_accuracy: accuracy,
            reported_accuracy: reported,
            start_s: self.start_of.get(&id).copied().unwrap_or(t),
            end_s: t,
            status: if stopped {
                TrialStatus::Stopped
            } else {
                TrialStatus::Finished
            },
        };
        self.writer.append_trial(&row).map_err(err)?;
        if epochs > 0 {
            self.history.push(HistoryEntry {
                model_id: id,
                father,
                graph,
                accuracy: reported,
            });
        }
        Ok(())
    }
}

/// Sends a request to the primary and waits for its answer.
fn ask<C: Communicator>(world: &C, msg: &ToPrimary) -> Result<ToGroup, String> {
    let root = world.process_at_rank(0);
    root.send(&encode(msg)[..]);
    let (bytes, _) = root.receive_vec::<u8>();
    decode(&bytes, DEFAULT_LIMIT_BYTES).map_err(err)
}

/// A group leader: proposes, registers and trains trials until told to stop. The other
/// ranks of the group follow the leader's epoch-by-epoch decisions (`member`).
pub fn leader<C: Communicator, G: Communicator>(
    world: &C,
    group_comm: &G,
    group: u32,
    cfg: &SimRunConfig,
) -> Result<(), String> {
    let writer = GroupWriter::create(&cfg.results, group, group_comm.size() as u32).map_err(err)?;
    let optimizer = BayesOptimizer::new(BayesConfig {
        threads: cfg.search_threads,
        seed: cfg.seed ^ u64::from(group),
        ..BayesConfig::default()
    })?;
    let mut history: Vec<Observed> = Vec::new();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed.wrapping_add(u64::from(group)));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string();
    let absorb = |reply: ToGroup, history: &mut Vec<Observed>| -> bool {
        match reply {
            ToGroup::History(delta) => {
                history.extend(delta.into_iter().map(|e| Observed {
                    id: e.model_id,
                    descriptor: e.graph.descriptor(),
                    graph: Arc::new(e.graph),
                    accuracy: e.accuracy,
                }));
                true
            }
            _ => false,
        }
    };
    let go_on = absorb(
        ask(
            world,
            &ToPrimary::Hello {
                group,
                ranks: group_comm.size() as u32,
                host,
            },
        )?,
        &mut history,
    );
    let mut pending: HashSet<Descriptor> = HashSet::new();
    let (mut round, mut call) = (0u32, 0u64);
    let mut running = go_on;
    'trials: while running {
        let h = match ask(world, &ToPrimary::Suggest { group, round })? {
            ToGroup::Hparams(h) => h,
            _ => break,
        };
        // A candidate the primary accepts as new.
        let (model_id, graph) = loop {
            call += 1;
            let (graph, father) = match optimizer.propose(&history, &pending, h.kernel_size, call) {
                Some(p) => (p.graph, Some(p.father)),
                None if round == 0 && group == 0 && history.is_empty() && pending.is_empty() => {
                    (cfg.start.clone(), None)
                }
                None => {
                    // No history yet: a random neighbour of the start.
                    match random_morphism(
                        &cfg.start,
                        h.kernel_size,
                        &Limits::default(),
                        &mut rng,
                        50,
                    ) {
                        Some((_, g)) => (g, None),
                        None => (cfg.start.clone(), None),
                    }
                }
            };
            let descriptor = graph.descriptor();
            match ask(
                world,
                &ToPrimary::Register {
                    group,
                    father,
                    graph: graph.clone(),
                    descriptor: descriptor.clone(),
                },
            )? {
                ToGroup::Registered { model_id } => {
                    pending.insert(descriptor);
                    break (model_id, graph);
                }
                ToGroup::Duplicate => {
                    pending.insert(descriptor);
                }
                _ => break 'trials,
            }
        };
        let trial = SimTrial::new(&graph, h, cfg.device, cfg.images.0, cfg.images.1, cfg.seed)
            .ok_or("invalid architecture")?;
        let count = OpCount::of(&graph).map_err(err)?;
        let steps = cfg
            .images
            .0
            .div_ceil(u64::from(h.batch_size) * group_comm.size() as u64);
        let budget = epoch_budget(round + 1, cfg.epochs);
        let mut stopper = EarlyStopping::new((6 + 2 * (round + 1)).min(20), 0.001);
        let (mut best, mut curve, mut done) = (0.0f64, Vec::new(), 0u32);
        for epoch in 1..=budget {
            let e = trial.epoch(epoch);
            std::thread::sleep(Duration::from_secs_f64(e.seconds / cfg.speedup));
            let row = EpochRow {
                time_s: now_s(),
                trial: u64::from(round),
                model_id,
                epoch,
                train_images: cfg.images.0,
                val_images: cfg.images.1,
                train_ops: u64::try_from(count.train_epoch(cfg.images.0, steps)).map_err(err)?,
                val_ops: u64::try_from(count.eval_epoch(cfg.images.1)).map_err(err)?,
                train_loss: e.val_loss,
                val_loss: e.val_loss,
                val_accuracy: e.val_accuracy,
                compute_s: e.seconds / cfg.speedup,
                allreduce_s: 0.0,
                allreduce_bytes: 0,
                data_wait_s: 0.0,
            };
            writer.append_epoch(&row).map_err(err)?;
            done = epoch;
            best = best.max(e.val_accuracy);
            curve.push(e.val_accuracy);
            let reply = ask(
                world,
                &ToPrimary::Progress {
                    group,
                    model_id,
                    epoch,
                    val_accuracy: e.val_accuracy,
                },
            )?;
            let stop_all = !matches!(reply, ToGroup::Continue);
            let early = stopper.update(e.val_loss);
            let flag = [u8::from(!(stop_all || early))];
            let mut f = flag;
            group_comm.process_at_rank(0).broadcast_into(&mut f[..]);
            if stop_all {
                running = false;
                break;
            }
            if early {
                break;
            }
        }
        let reported = if round < 3 {
            crate::train::schedule::predict_final_accuracy(&curve, cfg.epochs)
        } else {
            best
        };
        let reply = ask(
            world,
            &ToPrimary::Result {
                group,
                model_id,
                accuracy: best,
                reported,
                epochs: done,
                hparams: h,
            },
        )?;
        running &= absorb(reply, &mut history);
        round += 1;
    }
    // Tell the members, then the primary.
    let mut f = [2u8];
    group_comm.process_at_rank(0).broadcast_into(&mut f[..]);
    world
        .process_at_rank(0)
        .send(&encode(&ToPrimary::Bye { group })[..]);
    Ok(())
}

/// A non-leader rank of a group: follows the leader's per-epoch decisions until the end
/// (with the simulated trainer it has no tensors to train).
pub fn member<G: Communicator>(group_comm: &G) {
    loop {
        let mut f = [0u8];
        group_comm.process_at_rank(0).broadcast_into(&mut f[..]);
        if f[0] == 2 {
            return;
        }
    }
}
