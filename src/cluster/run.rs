//! `aiperf run`: the primary serves every group's requests over MPI (registration with
//! machine-wide de-duplication, TPE suggestions, progress, results answered with history
//! deltas) and records trials, architectures and TPE observations; each group leader takes
//! candidates from its background generator, broadcasts each trial to its group, and every
//! rank of the group trains it — with libtorch, data-parallel, or with the simulated trial
//! model — while the leader records every completed epoch. At the deadline (or on
//! SIGTERM/SIGINT) the primary answers every request with Stop, and the run ends when every
//! group has said goodbye.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpi::collective::{CommunicatorCollectives, Root};
use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::traits::Communicator;
use serde::{Deserialize, Serialize};

use aiperf_records::schema::{EpochRow, TpeRow, TrialRow, TrialStatus};
use aiperf_records::writer::{GroupWriter, PrimaryWriter, RunMeta};

use super::clock::Clock;
use super::generator::Generator;
use super::layout::Layout;
use super::protocol::{decode, encode, HistoryEntry, ToGroup, ToPrimary, DEFAULT_LIMIT_BYTES};
use crate::arch::{Descriptor, Graph};
use crate::data::Pack;
use crate::monitor::Monitor;
use crate::ops::OpCount;
use crate::search::{BayesConfig, Hparams, Observed, Space, Tpe, TpeConfig};
use crate::seeds::mix;
use crate::train::schedule::{epoch_budget, patience, predict_final_accuracy, EarlyStopping};
use crate::train::simulated::{SimDevice, SimTrial};
use crate::train::{EpochStats, TrainConfig, TrialSpec, TrialTrainer};

/// How the replicas train.
#[derive(Clone)]
pub enum TrainerSetup {
    /// No tensors: epochs take their operation count's time at a declared speed.
    Simulated {
        /// Declared speed of one accelerator (`accelerators` is set per group).
        device: SimDevice,
        /// Training and validation images per epoch.
        images: (u64, u64),
        /// Simulated seconds per wall-clock second.
        speedup: f64,
    },
    /// libtorch, data-parallel over the group.
    Real {
        /// How every trial trains.
        train: TrainConfig,
        /// This rank's device.
        device: tch::Device,
        /// The training split.
        train_pack: Arc<Pack>,
        /// The validation split.
        val_pack: Arc<Pack>,
    },
}

/// Settings of a run.
#[derive(Clone)]
pub struct RunConfig {
    /// Where the records go.
    pub results: PathBuf,
    /// Wall-clock duration.
    pub duration: Duration,
    /// The start architecture.
    pub start: Graph,
    /// Its name (recorded).
    pub start_name: String,
    /// The trainer.
    pub trainer: TrainerSetup,
    /// Full epoch budget.
    pub epochs: u32,
    /// Scale of the patience rule min(6 + 2·round, 20) (DESIGN.md §3).
    pub patience_scale: f64,
    /// The hyperparameter space (batch size per rank, kernel sizes).
    pub space: Space,
    /// Seed of everything.
    pub seed: u64,
    /// Threads of each leader's search pool.
    pub search_threads: usize,
    /// The resolved configuration, JSON, for the records.
    pub config_json: String,
    /// Dataset name (recorded).
    pub dataset: String,
    /// Arithmetic (recorded).
    pub precision: String,
    /// Host of every rank.
    pub hosts: Vec<String>,
    /// Device of every rank.
    pub devices: Vec<String>,
    /// This rank's view of the common clock.
    pub clock: Clock,
    /// The run's end on the common clock (t0 + duration).
    pub deadline_s: f64,
    /// Seconds between rank 0's status lines.
    pub status_interval_s: f64,
    /// Seconds a group may stay silent before the run is stopped as stalled.
    pub stall_timeout_s: f64,
    /// Seconds between resource samples written to the records.
    pub monitor_interval_s: f64,
    /// Set by SIGTERM/SIGINT.
    pub interrupted: Arc<AtomicBool>,
    /// Go on with the records already in `results` (`--resume`).
    pub resume: bool,
}

impl RunConfig {
    /// Whether the run is over for this rank: past the deadline or interrupted.
    fn over(&self) -> bool {
        self.clock.now() >= self.deadline_s || self.interrupted.load(Ordering::Relaxed)
    }
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
    cfg: &RunConfig,
    t0: f64,
    interrupted: &AtomicBool,
) -> Result<(), String> {
    let now_s = || cfg.clock.now();
    let meta = RunMeta {
        program_version: env!("CARGO_PKG_VERSION").into(),
        config_json: cfg.config_json.clone(),
        start_time_s: t0,
        world_size: world.size() as u32,
        groups: layout.groups(),
        accelerators: (world.size() - 1) as u32,
        hosts: cfg.hosts.clone(),
        devices: cfg.devices.clone(),
        seed: cfg.seed,
        dataset: cfg.dataset.clone(),
        start_architecture: cfg.start_name.clone(),
        precision: cfg.precision.clone(),
        fixed_algorithms: true,
    };
    let mut resumed: Option<Resumed> = None;
    let mut p = Primary {
        writer: if cfg.resume {
            // Read the stopped run first (read-only), then reopen its file for appending.
            let (state, stopped) = resume_state(cfg, layout.leaders.len())?;
            let writer = PrimaryWriter::reopen(&cfg.results, stopped, now_s()).map_err(err)?;
            resumed = Some(state);
            writer
        } else {
            PrimaryWriter::create(&cfg.results, &meta).map_err(err)?
        },
        tpe: Tpe::new(
            TpeConfig {
                seed: cfg.seed,
                ..TpeConfig::default()
            },
            cfg.space.clone(),
        )?,
        history: Vec::new(),
        seen: HashSet::new(),
        registered: Vec::new(),
        synced: vec![0; layout.leaders.len()],
        rounds: vec![0; layout.leaders.len()],
        next_id: 0,
        start_of: Default::default(),
    };
    if let Some(r) = resumed {
        log::info!(
            "resuming {}: {} models trained, {} registered, {} TPE observations, rounds {:?}",
            cfg.results.display(),
            r.history.len(),
            r.seen.len(),
            r.tpe.len(),
            r.rounds
        );
        p.history = r.history;
        p.seen = r.seen;
        p.next_id = r.next_id;
        p.rounds = r.rounds;
        for (h, loss) in r.tpe {
            p.tpe.observe(h, loss);
        }
    }
    let deadline = t0 + cfg.duration.as_secs_f64();
    let mut end: Option<f64> = None;
    let mut byes = 0;
    let (served, mut busy, cpu0) = (Instant::now(), 0.0f64, process_cpu_s());
    let mut line = Status {
        next_s: t0 + cfg.status_interval_s,
        ..Status::default()
    };
    // Fault handling: a group silent for longer than the stall timeout is reported by name
    // and the run ends with what was recorded.
    let groups = layout.leaders.len();
    let (mut last_seen, mut gone) = (vec![t0; groups], vec![false; groups]);
    let mut stalled: Vec<usize> = Vec::new();
    let mut requests = 0u64;
    while byes + stalled.len() < groups {
        let received = receive_any(world, Duration::from_secs(1));
        let now = now_s();
        if now >= line.next_s {
            line.print(now - t0, p.next_id, p.history.len());
            while line.next_s <= now {
                line.next_s += cfg.status_interval_s;
            }
        }
        for g in 0..groups {
            if !gone[g] && !stalled.contains(&g) && now - last_seen[g] > cfg.stall_timeout_s {
                let r = layout.leaders[g];
                log::error!(
                    "group {g} (leader rank {r} on {}) made no progress for {:.0} s (--stall-timeout {:.0}): stopping the run; its completed epochs are in group-{g}.h5",
                    cfg.hosts.get(r).map_or("?", String::as_str),
                    now - last_seen[g],
                    cfg.stall_timeout_s
                );
                stalled.push(g);
            }
        }
        let Some((bytes, status)) = received else {
            continue;
        };
        let handling = Instant::now();
        requests += 1;
        let src = status.source_rank();
        let msg: ToPrimary =
            decode(&bytes, DEFAULT_LIMIT_BYTES).map_err(|e| format!("from rank {src}: {e}"))?;
        if let Some(g) = layout.group_of.get(src as usize).copied().flatten() {
            let g = g as usize;
            last_seen[g] = now;
            stalled.retain(|&s| s != g);
            gone[g] |= matches!(msg, ToPrimary::Bye { .. });
        }
        let stopping =
            now >= deadline || interrupted.load(Ordering::Relaxed) || !stalled.is_empty();
        if stopping && end.is_none() {
            end = Some(now.min(deadline));
        }
        let reply = match msg {
            ToPrimary::Hello { group, .. } => Some(match p.delta(group) {
                ToGroup::History(history) => ToGroup::Welcome {
                    history,
                    round: p.rounds[group as usize],
                },
                other => other,
            }),
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
                p.start_of.insert(id, now);
                p.registered.push((id, father, graph, group));
                ToGroup::Registered { model_id: id }
            }),
            ToPrimary::Suggest { .. } => Some(if stopping {
                ToGroup::Stop
            } else {
                ToGroup::Hparams(p.tpe.suggest())
            }),
            ToPrimary::Progress {
                val_accuracy, ops, ..
            } => {
                line.epochs += 1;
                line.ops += u128::from(ops);
                line.best = line.best.max(val_accuracy);
                Some(if stopping {
                    ToGroup::Stop
                } else {
                    ToGroup::Continue
                })
            }
            ToPrimary::Result {
                group,
                model_id,
                accuracy,
                reported,
                epochs,
                hparams,
            } => {
                p.record_result(
                    group, model_id, accuracy, reported, epochs, hparams, stopping, now,
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
        busy += handling.elapsed().as_secs_f64();
    }
    let wall = served.elapsed().as_secs_f64();
    log::info!(
        "primary: served {requests} requests from {} groups in {wall:.1} s ({:.1}/s), busy {:.2}% of the time, {:.2} CPU s",
        layout.leaders.len(),
        requests as f64 / wall.max(1e-9),
        100.0 * busy / wall.max(1e-9),
        process_cpu_s() - cpu0
    );
    if !stalled.is_empty() && end.is_none() {
        end = Some(now_s().min(deadline));
    }
    p.writer
        .finish(end.unwrap_or_else(now_s).min(now_s()))
        .map_err(err)?;
    if stalled.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "stalled group(s) {stalled:?} made no progress for --stall-timeout {:.0} s; primary.h5 is closed, the other groups stopped cleanly, and every completed epoch is on record: re-score with `aiperf-score {}` once the job has ended",
            cfg.stall_timeout_s,
            cfg.results.display()
        ))
    }
}

/// What the primary recovers from a stopped run's records.
struct Resumed {
    history: Vec<HistoryEntry>,
    seen: HashSet<Descriptor>,
    next_id: u64,
    rounds: Vec<u32>,
    tpe: Vec<(Hparams, f64)>,
}

/// Reads a stopped or crashed run's records: the trained models (history and search tree),
/// every registered architecture (de-duplication), each group's round, and the TPE
/// observations; also the time of its last record (when it stopped).
fn resume_state(cfg: &RunConfig, groups: usize) -> Result<(Resumed, f64), String> {
    let dir = &cfg.results;
    let run = aiperf_records::read_run(dir).map_err(err)?;
    let archs = aiperf_records::read_architectures(dir).map_err(err)?;
    let tpe = aiperf_records::read_tpe(dir).map_err(err)?;
    let mut graphs = std::collections::HashMap::new();
    let mut seen = HashSet::new();
    let mut next_id = 0;
    for (id, json) in archs {
        let g = Graph::from_json(&json)
            .map_err(|e| format!("{}: architecture {id}: {e}", dir.display()))?;
        seen.insert(g.descriptor());
        graphs.insert(id, g);
        next_id = next_id.max(id + 1);
    }
    let mut rounds = vec![0u32; groups];
    let mut history = Vec::new();
    for t in &run.trials {
        if let Some(r) = rounds.get_mut(t.group as usize) {
            *r += 1;
        }
        if t.epochs > 0 {
            let graph = graphs.get(&t.model_id).cloned().ok_or_else(|| {
                format!(
                    "{}: trial of model {} has no recorded architecture",
                    dir.display(),
                    t.model_id
                )
            })?;
            history.push(HistoryEntry {
                model_id: t.model_id,
                father: u64::try_from(t.father).ok(),
                graph,
                accuracy: t.reported_accuracy,
            });
        }
    }
    let last = run
        .groups
        .iter()
        .flat_map(|g| g.epochs.iter().map(|e| e.time_s))
        .chain(run.trials.iter().map(|t| t.end_s))
        .chain(tpe.iter().map(|t| t.time_s))
        .chain(run.info.end_time_s)
        .fold(run.info.start_time_s, f64::max);
    let tpe = tpe
        .into_iter()
        .map(|t| {
            (
                Hparams {
                    batch_size: t.batch_size,
                    kernel_size: t.kernel_size,
                },
                t.loss,
            )
        })
        .collect();
    Ok((
        Resumed {
            history,
            seen,
            next_id,
            rounds,
            tpe,
        },
        last,
    ))
}

/// Rank 0's running totals for the status line.
#[derive(Default)]
struct Status {
    next_s: f64,
    epochs: u64,
    ops: u128,
    best: f64,
}

impl Status {
    /// One line for batch logs: elapsed, trials, epochs, current OPS, best accuracy.
    fn print(&self, elapsed: f64, registered: u64, finished: usize) {
        let e = elapsed.max(0.0) as u64;
        log::info!(
            "status: {:02}:{:02}:{:02} elapsed, {finished} trials finished ({} running), {} epochs, {:.4e} OPS, best accuracy {:.4}",
            e / 3600,
            e / 60 % 60,
            e % 60,
            registered.saturating_sub(finished as u64),
            self.epochs,
            self.ops as f64 / elapsed.max(1e-9),
            self.best
        );
    }
}

/// CPU seconds this process has used (user + system, from /proc/self/stat; 0 where absent).
fn process_cpu_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) — utime and stime are the 12th
    // and 13th of them, in clock ticks (USER_HZ, 100 on Linux).
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// The next message from any rank, without spinning a core (the primary usually shares a
/// node with training ranks): probes, sleeping between probes (up to 1 ms) while none waits.
/// `None` after `wait` without a message.
fn receive_any<C: Communicator>(
    world: &C,
    wait: Duration,
) -> Option<(Vec<u8>, mpi::point_to_point::Status)> {
    let started = Instant::now();
    let mut pause = Duration::from_micros(20);
    loop {
        if let Some(probed) = world.any_process().immediate_matched_probe() {
            return Some(probed.matched_receive_vec::<u8>());
        }
        if started.elapsed() >= wait {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
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
        t: f64,
    ) -> Result<(), String> {
        let Some((_, father, graph, _)) = self.registered.iter().find(|r| r.0 == id).cloned()
        else {
            return Err(format!(
                "group {group} reported model {id}, which was never registered"
            ));
        };
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

/// What a leader tells its group before each trial.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum GroupOrder {
    /// Train this trial.
    Train {
        /// Global model id.
        model_id: u64,
        /// The group's round (0-based).
        round: u32,
        /// What to train.
        spec: TrialSpec,
    },
    /// The run is over.
    End,
}

/// Broadcasts a serde value from the communicator's rank 0 (length, then bincode bytes);
/// rank 0 passes `Some`, the others `None`; every rank gets the value.
pub fn broadcast_value<G: Communicator, T: Serialize + for<'de> Deserialize<'de>>(
    comm: &G,
    value: Option<&T>,
) -> Result<T, String> {
    let root = comm.process_at_rank(0);
    let mut bytes = match value {
        Some(v) => bincode::serde::encode_to_vec(v, bincode::config::standard()).map_err(err)?,
        None => Vec::new(),
    };
    let mut len = [bytes.len() as u64];
    root.broadcast_into(&mut len[..]);
    bytes.resize(len[0] as usize, 0);
    root.broadcast_into(&mut bytes[..]);
    bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
        .map(|(v, _)| v)
        .map_err(err)
}

/// The leader's per-epoch verdict, broadcast to the group.
const GO_ON: u8 = 1;
const STOP_TRIAL: u8 = 0;
const STOP_RUN: u8 = 2;

/// One trial's epochs on one rank.
enum Engine<'c, G: Communicator> {
    Simulated {
        trial: SimTrial,
        images: (u64, u64),
        steps: u64,
        speedup: f64,
    },
    Real(Box<TrialTrainer<'c, G>>),
}

impl<'c, G: Communicator> Engine<'c, G> {
    fn new(comm: &'c G, cfg: &RunConfig, spec: &TrialSpec) -> Result<Self, String> {
        let ranks = comm.size() as u64;
        Ok(match &cfg.trainer {
            TrainerSetup::Simulated {
                device,
                images,
                speedup,
            } => {
                let device = SimDevice {
                    accelerators: ranks as u32,
                    ..*device
                };
                Engine::Simulated {
                    trial: SimTrial::new(
                        &spec.graph,
                        spec.hparams,
                        device,
                        images.0,
                        images.1,
                        cfg.seed,
                    )
                    .ok_or("invalid architecture")?,
                    images: *images,
                    steps: images
                        .0
                        .div_ceil(u64::from(spec.hparams.batch_size) * ranks),
                    speedup: *speedup,
                }
            }
            TrainerSetup::Real {
                train,
                device,
                train_pack,
                val_pack,
            } => Engine::Real(Box::new(
                TrialTrainer::new(comm, train, *device, train_pack, val_pack, spec).map_err(err)?,
            )),
        })
    }

    /// Runs epoch `epoch`; marked abandoned when the run ended during it (not counted).
    fn epoch(&mut self, epoch: u32, stop: &dyn Fn() -> bool) -> Result<EpochStats, String> {
        match self {
            Engine::Simulated {
                trial,
                images,
                steps,
                speedup,
            } => {
                let e = trial.epoch(epoch);
                let seconds = e.seconds / *speedup;
                let began = Instant::now();
                let until = began + Duration::from_secs_f64(seconds);
                while let Some(left) = until.checked_duration_since(Instant::now()) {
                    if stop() {
                        let spent = began.elapsed().as_secs_f64();
                        return Ok(EpochStats {
                            compute_s: spent,
                            wall_s: spent,
                            abandoned: true,
                            ..EpochStats::default()
                        });
                    }
                    std::thread::sleep(left.min(Duration::from_millis(50)));
                }
                Ok(EpochStats {
                    train_images: images.0,
                    steps: *steps,
                    val_images: images.1,
                    train_loss: e.val_loss,
                    val_loss: e.val_loss,
                    val_accuracy: e.val_accuracy,
                    compute_s: seconds,
                    wall_s: seconds,
                    ..EpochStats::default()
                })
            }
            Engine::Real(t) => t.epoch(epoch, stop).map_err(err),
        }
    }

    /// Whether every rank of the group holds the same parameters (real trainer; collective).
    fn replicas_agree(&self, comm: &G) -> bool {
        match self {
            Engine::Simulated { .. } => true,
            Engine::Real(t) => {
                let mine = t.params_hash();
                let mut all = vec![0u64; comm.size() as usize];
                comm.all_gather_into(&mine, &mut all[..]);
                all.iter().all(|&h| h == mine)
            }
        }
    }
}

/// The leader's side of a trial: records and the primary.
struct LeaderSide<'a, C: Communicator> {
    world: &'a C,
    writer: &'a GroupWriter,
    group: u32,
    monitor: &'a Monitor,
}

impl<C: Communicator> LeaderSide<'_, C> {
    /// Writes the resource samples taken since the last call.
    fn flush_monitor(&self) -> Result<(), String> {
        for row in self.monitor.drain() {
            self.writer.append_monitor(&row).map_err(err)?;
        }
        Ok(())
    }
}

/// How a trial ended.
struct TrialOutcome {
    best: f64,
    curve: Vec<f64>,
    epochs: u32,
    stop_run: bool,
    /// Seconds inside train/eval steps and exchanges (abandoned epochs included), and the
    /// trial's wall time.
    busy_s: f64,
    wall_s: f64,
}

/// Trains one trial on every rank of the group; the leader (with `lead`) records each epoch,
/// reports progress and decides whether to go on, and the group follows its verdict.
fn run_trial<C: Communicator, G: Communicator>(
    comm: &G,
    cfg: &RunConfig,
    model_id: u64,
    round: u32,
    spec: &TrialSpec,
    lead: Option<&LeaderSide<'_, C>>,
) -> Result<TrialOutcome, String> {
    let started = Instant::now();
    let mut engine = Engine::new(comm, cfg, spec)?;
    let count = OpCount::of(&spec.graph).map_err(err)?;
    let mut stopper = EarlyStopping::new(patience(round + 1, cfg.patience_scale), 0.001);
    let mut out = TrialOutcome {
        best: 0.0,
        curve: Vec::new(),
        epochs: 0,
        stop_run: false,
        busy_s: 0.0,
        wall_s: 0.0,
    };
    for epoch in 1..=spec.epochs {
        // The leader watches the clock and the signals; with the real trainer its flag
        // reaches every rank inside the gradient exchange, so the group stops together.
        let e = engine.epoch(epoch, &|| lead.is_some() && cfg.over())?;
        out.busy_s += e.compute_s + e.allreduce_s;
        if e.abandoned {
            // The run ended during the epoch: it does not count.
            let mut verdict = [STOP_RUN];
            comm.process_at_rank(0).broadcast_into(&mut verdict[..]);
            out.stop_run = true;
            break;
        }
        if !engine.replicas_agree(comm) {
            return Err(format!(
                "model {model_id}, epoch {epoch}: the ranks of the group hold different parameters after the gradient exchange (run `aiperf dp-check` under the same launcher to diagnose)"
            ));
        }
        let mut verdict = [GO_ON];
        if lead.is_some() && cfg.over() {
            // Completed after the deadline (during validation): it would not count either.
            verdict[0] = STOP_RUN;
        } else if let Some(l) = lead {
            let row = EpochRow {
                time_s: cfg.clock.now(),
                trial: u64::from(round),
                model_id,
                epoch,
                train_images: e.train_images,
                val_images: e.val_images,
                train_ops: u64::try_from(count.train_epoch(e.train_images, e.steps))
                    .map_err(err)?,
                val_ops: u64::try_from(count.eval_epoch(e.val_images)).map_err(err)?,
                train_loss: e.train_loss,
                val_loss: e.val_loss,
                val_accuracy: e.val_accuracy,
                compute_s: e.compute_s,
                allreduce_s: e.allreduce_s,
                allreduce_bytes: e.allreduce_bytes,
                data_wait_s: e.data_wait_s,
            };
            l.writer.append_epoch(&row).map_err(err)?;
            l.flush_monitor()?;
            // Fault injection for the tests: this group hangs after its first epoch.
            if std::env::var("AIPERF_FAULT_HANG_GROUP").ok() == Some(l.group.to_string()) {
                log::warn!("group {}: hanging (AIPERF_FAULT_HANG_GROUP)", l.group);
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            out.epochs = epoch;
            out.best = out.best.max(e.val_accuracy);
            out.curve.push(e.val_accuracy);
            log::info!(
                "group {} model {model_id} epoch {epoch}/{}: val acc {:.4}, loss {:.4}, {:.0} img/s, compute {:.1} s, all-reduce {:.2} s, data wait {:.2} s",
                l.group,
                spec.epochs,
                e.val_accuracy,
                e.val_loss,
                e.train_images as f64 / e.wall_s.max(1e-9),
                e.compute_s,
                e.allreduce_s,
                e.data_wait_s
            );
            let reply = ask(
                l.world,
                &ToPrimary::Progress {
                    group: l.group,
                    model_id,
                    epoch,
                    val_accuracy: e.val_accuracy,
                    ops: row.train_ops.saturating_add(row.val_ops),
                },
            )?;
            verdict[0] = if !matches!(reply, ToGroup::Continue) {
                STOP_RUN
            } else if stopper.update(e.val_loss) {
                STOP_TRIAL
            } else {
                GO_ON
            };
        }
        comm.process_at_rank(0).broadcast_into(&mut verdict[..]);
        match verdict[0] {
            GO_ON => {}
            STOP_RUN => {
                out.stop_run = true;
                break;
            }
            _ => break,
        }
    }
    out.wall_s = started.elapsed().as_secs_f64();
    Ok(out)
}

/// A group leader: takes candidates from its background generator, registers them, has the
/// group train them, and reports results until told to stop.
pub fn leader<C: Communicator, G: Communicator>(
    world: &C,
    group_comm: &G,
    group: u32,
    cfg: &RunConfig,
) -> Result<(), String> {
    // The folder may be node-local (no shared filesystem needed): create it here too.
    std::fs::create_dir_all(&cfg.results)
        .map_err(|e| format!("creating {}: {e}", cfg.results.display()))?;
    let first_kernel = cfg.space.kernel_sizes.first().copied().unwrap_or(3);
    let mut generator = Generator::start(
        BayesConfig {
            threads: cfg.search_threads,
            seed: cfg.seed ^ u64::from(group),
            ..BayesConfig::default()
        },
        cfg.start.clone(),
        group,
        cfg.seed,
        first_kernel,
        1,
    )?;
    let mut history: Vec<Observed> = Vec::new();
    let host = cfg
        .hosts
        .get(world.rank() as usize)
        .cloned()
        .unwrap_or_default();
    let absorb = |reply: ToGroup, history: &mut Vec<Observed>| -> bool {
        match reply {
            ToGroup::History(delta) | ToGroup::Welcome { history: delta, .. } => {
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
    let welcome = ask(
        world,
        &ToPrimary::Hello {
            group,
            ranks: group_comm.size() as u32,
            host,
        },
    )?;
    // A resumed run goes on from the group's round (budgets, patience, predictions).
    let mut round = match welcome {
        ToGroup::Welcome { round, .. } => round,
        _ => 0,
    };
    let mut running = absorb(welcome, &mut history);
    // After the welcome: the primary has read a resumed run's records by then.
    let writer = if cfg.resume {
        GroupWriter::open_or_create(&cfg.results, group, group_comm.size() as u32)
    } else {
        GroupWriter::create(&cfg.results, group, group_comm.size() as u32)
    }
    .map_err(err)?;

    generator.update(history.clone(), first_kernel);
    let clock = cfg.clock;
    let monitor = Monitor::start(Duration::from_secs_f64(cfg.monitor_interval_s), move || {
        clock.now()
    });
    let side = LeaderSide {
        world,
        writer: &writer,
        group,
        monitor: &monitor,
    };
    let first_round = round;
    let (began, mut busy, mut in_trials) = (Instant::now(), 0.0f64, 0.0f64);
    let mut checked = 0u32;
    // From the end of the first trial on, the generator's buffer is warm.
    let mut warm: Option<(Instant, f64)> = None;
    'trials: while running {
        let mut h = match ask(world, &ToPrimary::Suggest { group, round })? {
            ToGroup::Hparams(h) => h,
            _ => break,
        };
        generator.update(history.clone(), h.kernel_size);
        // A candidate the primary accepts as new.
        let (model_id, candidate) = loop {
            let c = generator.take()?;
            match ask(
                world,
                &ToPrimary::Register {
                    group,
                    father: c.father,
                    graph: c.graph.clone(),
                    descriptor: c.graph.descriptor(),
                },
            )? {
                ToGroup::Registered { model_id } => break (model_id, c),
                ToGroup::Duplicate => {}
                _ => break 'trials,
            }
        };
        // The kernel size that really shaped the candidate is the one recorded.
        h.kernel_size = candidate.kernel;
        let spec = TrialSpec {
            graph: candidate.graph,
            hparams: h,
            seed: mix(cfg.seed ^ mix(model_id)),
            epochs: epoch_budget(round + 1, cfg.epochs),
        };
        let order = GroupOrder::Train {
            model_id,
            round,
            spec: spec.clone(),
        };
        broadcast_value(group_comm, Some(&order))?;
        let out = run_trial(group_comm, cfg, model_id, round, &spec, Some(&side))?;
        busy += out.busy_s;
        in_trials += out.wall_s;
        match warm {
            Some((_, ref mut b)) => *b += out.busy_s,
            None => warm = Some((Instant::now(), 0.0)),
        }
        checked += out.epochs;
        let reported = if round < 3 {
            predict_final_accuracy(&out.curve, cfg.epochs)
        } else {
            out.best
        };
        let reply = ask(
            world,
            &ToPrimary::Result {
                group,
                model_id,
                accuracy: out.best,
                reported,
                epochs: out.epochs,
                hparams: h,
            },
        )?;
        running = !out.stop_run && absorb(reply, &mut history);
        generator.update(history.clone(), h.kernel_size);
        round += 1;
    }
    broadcast_value(group_comm, Some(&GroupOrder::End))?;
    let wall = began.elapsed().as_secs_f64();
    let warm_pct = warm.map_or(0.0, |(t, b)| {
        100.0 * b / t.elapsed().as_secs_f64().max(1e-9)
    });
    log::info!(
        "group {group}: {} trials; leader busy in train/eval steps and exchanges {:.1}% of the run, {warm_pct:.1}% after the first trial, {:.1}% of trial time; waited {:.2} s for the generator",
        round - first_round,
        100.0 * busy / wall.max(1e-9),
        100.0 * busy / in_trials.max(1e-9),
        generator.waited_s()
    );
    if matches!(cfg.trainer, TrainerSetup::Real { .. }) {
        log::info!(
            "group {group}: parameters bit-identical on all {} ranks after each of {checked} epochs",
            group_comm.size()
        );
    }
    drop(generator);
    side.flush_monitor()?;
    drop(monitor);
    // Close the records before saying goodbye: rank 0 reads them once every group has.
    drop(writer);
    world
        .process_at_rank(0)
        .send(&encode(&ToPrimary::Bye { group })[..]);
    Ok(())
}

/// A non-leader rank of a group: trains each trial the leader broadcasts until the end.
pub fn member<G: Communicator>(group_comm: &G, cfg: &RunConfig) -> Result<(), String> {
    loop {
        match broadcast_value::<G, GroupOrder>(group_comm, None)? {
            GroupOrder::End => return Ok(()),
            GroupOrder::Train {
                model_id,
                round,
                spec,
            } => {
                run_trial::<G, G>(group_comm, cfg, model_id, round, &spec, None)?;
            }
        }
    }
}
