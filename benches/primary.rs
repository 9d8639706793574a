//! The primary at the largest machines' scale (run by `scripts/bench/bench-primary`, not a
//! test): rank 0's state machine, writing a real `primary.h5`, serving PAPER_GROUPS replica
//! groups (the paper's 512; 16,384 for a machine of 10,000 nodes and more) in turn until the
//! history holds HISTORY trained models (up to 50,000), on ResNet-50-sized architectures
//! (ARCHITECTURES=FOLDER: a run's own first, in the order it registered them).
//! Each group's trial is the requests a leader sends — Register, Suggest, EPOCHS × Progress,
//! Result with the suggested hyperparameters and a noisy, rising accuracy — and each reply
//! is encoded and released as the serve loop does, inside the timed span. CACHES=cold writes
//! a buffer twice the last-level cache before each request, so that it finds nothing of the
//! primary cached (a run's primary waits for its requests while other ranks run, so its
//! caches are colder than a loop's; the two bracket it). In turn is the worst case for the
//! replies: every other group's model ends between two of a group's. Prints one JSON
//! object per band of history size: wall microseconds per request of each kind (handling,
//! the HDF5 rows it appends and flushes, encoding the reply: the serve loop is one thread, so
//! its wall time is what bounds the request rate; also the serving thread's CPU time, which a
//! run's last "primary:" line gives per kind), the mean and largest bytes of the Result
//! replies, which carry what changed in the view since the group's last, and the process's
//! CPU seconds over the band (which include generating the architectures and, with
//! CACHES=cold, the evictions). The evictions leave the buffer's lines dirty, so a request
//! also pays for writing them back, as one does after the node's other ranks wrote to
//! memory. `trial_cpu_s` is the wall time of a trial's requests (one thread, never asleep).

use std::collections::HashSet;
use std::time::Instant;

use aiperf::arch::{resnet50, Graph, Shape};
use aiperf::roles::primary::served::thread_cpu_s;
use aiperf::roles::primary::{Primary, PrimaryConfig};
use aiperf::roles::status::process_cpu_s;
use aiperf::search::{random_morphism, Hparams, Limits, Space};
use aiperf::world::protocol::{encode, ToGroup, ToPrimary};
use aiperf_records::writer::{PrimaryWriter, RunMeta};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default)
}

/// Per-kind totals within one band of history sizes.
#[derive(Default)]
struct Band {
    seconds: [f64; 4],
    cpu: [f64; 4],
    count: [u64; 4],
    reply_bytes: u64,
    largest_reply: u64,
}

const KINDS: [&str; 4] = ["register", "suggest", "progress", "result"];

/// Distinct ResNet-50 morphs, as the groups' generators would propose them; first, with
/// ARCHITECTURES=FOLDER, a run's own architectures in the order it registered them.
struct Proposer {
    start: Graph,
    current: Vec<Graph>,
    seen: HashSet<aiperf::arch::Descriptor>,
    rng: ChaCha8Rng,
    replay: std::collections::VecDeque<Graph>,
}

/// The architectures of the run in `dir`, by model id.
fn replayed(dir: &str) -> std::collections::VecDeque<Graph> {
    let mut archs = aiperf_records::read_architectures(std::path::Path::new(dir))
        .unwrap_or_else(|e| panic!("ARCHITECTURES={dir}: {e}"));
    archs.sort_by_key(|(id, _)| *id);
    archs
        .into_iter()
        .map(|(id, json)| {
            Graph::from_json(&json).unwrap_or_else(|e| panic!("{dir}: model {id}: {e}"))
        })
        .collect()
}

impl Proposer {
    fn next(&mut self, group: usize) -> Graph {
        if let Some(g) = self.replay.pop_front() {
            return g;
        }
        loop {
            let g = &self.current[group];
            let kernel = [3, 5, 7][self.rng.random_range(0..3)];
            let next = match random_morphism(g, kernel, &Limits::default(), &mut self.rng, 20) {
                Some((_, next)) if self.rng.random_bool(0.9) => next,
                _ => self.start.clone(),
            };
            self.current[group] = next.clone();
            if self.seen.insert(next.descriptor()) {
                return next;
            }
        }
    }
}

/// CACHES=cold: a buffer twice the last-level cache, written one byte per cache line before
/// each request, so that the request finds none of the primary's state cached, as a run's
/// primary that slept until the request came, while the node's other ranks ran, may.
struct Evictor {
    buffer: Vec<u8>,
    pass: u8,
}

impl Evictor {
    /// With CACHES=cold, an evictor twice the largest cache sysfs reports (64 MiB where it
    /// reports none); with CACHES=hot or unset, none.
    fn from_env() -> Option<Evictor> {
        match std::env::var("CACHES").as_deref() {
            Ok("cold") => Some(Evictor {
                buffer: vec![0; 2 * largest_cache_bytes().unwrap_or(32 << 20)],
                pass: 0,
            }),
            Ok("hot") | Err(_) => None,
            Ok(other) => panic!("CACHES={other}: use hot (the default) or cold"),
        }
    }

    fn evict(&mut self) {
        self.pass = self.pass.wrapping_add(1);
        for i in (0..self.buffer.len()).step_by(64) {
            self.buffer[i] = self.pass;
        }
        std::hint::black_box(&self.buffer);
    }
}

/// The largest cache of CPU 0, from /sys/devices/system/cpu/cpu0/cache/index*/size
/// ("32768K").
fn largest_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("size")).ok())
        .filter_map(|s| {
            let s = s.trim();
            let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
            let scale = match unit {
                "K" => 1 << 10,
                "M" => 1 << 20,
                _ => return None,
            };
            Some(n.parse::<usize>().ok()? * scale)
        })
        .max()
}

fn meta(groups: u32) -> RunMeta {
    RunMeta {
        platform: Vec::new(),
        ceilings: Vec::new(),
        program_version: env!("CARGO_PKG_VERSION").into(),
        config_json: "{}".into(),
        start_time_s: 0.0,
        world_size: groups + 1,
        groups,
        accelerators: groups,
        hosts: vec!["bench".into()],
        devices: vec!["emulated".into()],
        seed: 1,
        dataset: "imagenet".into(),
        start_architecture: "resnet50".into(),
        precision: "emulated".into(),
        dataset_json: "{}".into(),
        search_json: "{}".into(),
    }
}

/// What a trial keeps of a reply: a Registered's model id, an Hparams' hyperparameters.
#[derive(Default)]
struct Kept {
    model_id: Option<u64>,
    hparams: Option<Hparams>,
}

/// Handles `msg` from group `g`'s leader (world rank g + 1), encodes and releases the
/// reply; adds the wall and thread CPU time to `band` under `kind`.
fn timed(
    (p, evict): (&mut Primary<PrimaryWriter>, &mut Option<Evictor>),
    band: &mut Band,
    kind: usize,
    g: usize,
    msg: ToPrimary,
) -> Kept {
    if let Some(e) = evict {
        e.evict();
    }
    let (t, cpu) = (Instant::now(), thread_cpu_s());
    let reply = p
        .handle(g as i32 + 1, msg, 1.0, false)
        .expect("a valid request");
    let kept = match reply {
        Some(ToGroup::Registered { model_id }) => Kept {
            model_id: Some(model_id),
            hparams: None,
        },
        Some(ToGroup::Hparams(h)) => Kept {
            model_id: None,
            hparams: Some(h),
        },
        _ => Kept::default(),
    };
    // As the serve loop does: the reply encoded, then released (a Result's carries the
    // models that entered the view) before the clock is read; the encoded bytes after it
    // (the loop sends them).
    let encoded = reply.map(|r| encode(&r));
    band.seconds[kind] += t.elapsed().as_secs_f64();
    band.cpu[kind] += thread_cpu_s() - cpu;
    let bytes = encoded.map_or(0, |b| b.len());
    band.count[kind] += 1;
    if kind == 3 {
        band.reply_bytes += bytes as u64;
        band.largest_reply = band.largest_reply.max(bytes as u64);
    }
    kept
}

/// One trial of group `g` on `graph`: Register, Suggest, `epochs` × Progress, Result, each
/// timed into `band`. False when the primary called the graph a duplicate.
fn trial(
    (p, evict): (&mut Primary<PrimaryWriter>, &mut Option<Evictor>),
    band: &mut Band,
    (g, graph): (usize, Graph),
    epochs: u32,
    accuracy: f64,
) -> bool {
    let group = g as u32;
    let h = Hparams {
        batch_size: 64,
        kernel_size: 3,
    };
    let reg = ToPrimary::Register {
        group,
        father: None,
        graph,
    };
    let Some(model_id) = timed((p, evict), band, 0, g, reg).model_id else {
        return false;
    };
    let suggest = ToPrimary::Suggest {
        group,
        round: 0,
        father: None,
    };
    // The trial reports the hyperparameters it was given, as a leader does: TPE's work
    // depends on what it observed.
    let h = timed((p, evict), band, 1, g, suggest).hparams.unwrap_or(h);
    for epoch in 0..epochs {
        let msg = ToPrimary::Progress {
            group,
            model_id,
            epoch,
            val_accuracy: 0.5,
            ops: 1,
        };
        timed((p, evict), band, 2, g, msg);
    }
    let msg = ToPrimary::Result {
        group,
        model_id,
        accuracy,
        reported: accuracy,
        epochs,
        hparams: h,
        failed: false,
    };
    timed((p, evict), band, 3, g, msg);
    true
}

/// A primary writing `primary.h5` in `dir`, serving `groups` groups (leaders at world ranks
/// 1..=groups), each of which has said hello.
fn primary(dir: &std::path::Path, groups: usize) -> Primary<PrimaryWriter> {
    let writer = PrimaryWriter::create(
        &aiperf_records::folder::held_by(dir, "aiperf primary bench").expect("claim"),
        &meta(groups as u32),
    )
    .expect("primary.h5");
    let defaults = Hparams {
        batch_size: 64,
        kernel_size: 3,
    };
    let mut p = Primary::new(
        writer,
        PrimaryConfig {
            leaders: (1..=groups).collect(),
            space: Space::default(),
            defaults,
            seed: 1,
            deadline_s: f64::INFINITY,
            stop_after_epochs: None,
            stop_after_trials: None,
            view_bound: aiperf::search::bayes::MAX_FIT,
        },
    )
    .expect("a primary");
    for g in 0..groups {
        let hello = ToPrimary::Hello {
            group: g as u32,
            ranks: 8,
            host: "n".into(),
        };
        p.handle(g as i32 + 1, hello, 0.0, false).expect("hello");
    }
    p
}

fn main() {
    let groups: usize = env_or("PAPER_GROUPS", 512);
    let history: usize = env_or("HISTORY", 5000);
    let epochs: u32 = env_or("EPOCHS", 1);
    let mut bands: Vec<usize> = [100, 500, 1000, 2000, 5000, 10_000, 20_000]
        .into_iter()
        .filter(|&b| b < history)
        .collect();
    bands.push(history);
    let dir = std::env::temp_dir().join(format!("aiperf-bench-primary-{}", std::process::id()));
    let mut p = primary(&dir, groups);
    let start = resnet50(Shape::new(3, 224, 224), 1000);
    let mut proposer = Proposer {
        current: vec![start.clone(); groups],
        start,
        seen: HashSet::new(),
        rng: ChaCha8Rng::seed_from_u64(512),
        replay: std::env::var("ARCHITECTURES")
            .map(|d| replayed(&d))
            .unwrap_or_default(),
    };
    let mut evict = Evictor::from_env();
    let caches = if evict.is_some() { "cold" } else { "hot" };
    let (mut done, mut band, mut band_start, mut cpu0) =
        (0usize, Band::default(), 0usize, process_cpu_s());
    let (mut g, mut noise) = (0usize, ChaCha8Rng::seed_from_u64(7));
    for &edge in &bands {
        while done < edge {
            // Rising with the search, and noisy as trained models' are: TPE sorts its
            // observations by loss, and sorting costs more when they arrive out of order.
            let accuracy =
                0.5 + 0.4 * (done as f64 / history as f64) + noise.random_range(-0.05..0.05);
            let (server, proposal) = ((&mut p, &mut evict), (g, proposer.next(g)));
            if !trial(server, &mut band, proposal, epochs, accuracy) {
                continue;
            }
            done += 1;
            g = (g + 1) % groups;
        }
        let cpu = process_cpu_s() - cpu0;
        report((groups, caches), band_start, edge, &band, cpu);
        (band, band_start, cpu0) = (Band::default(), edge, process_cpu_s());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn report((groups, caches): (usize, &str), from: usize, to: usize, b: &Band, cpu: f64) {
    let us = |k: usize| 1e6 * b.seconds[k] / b.count[k].max(1) as f64;
    let per_trial: f64 = (0..4).map(|k| b.seconds[k]).sum::<f64>() / b.count[3].max(1) as f64;
    let cpu_us = |k: usize| 1e6 * b.cpu[k] / b.count[k].max(1) as f64;
    let fields: Vec<String> = (0..4)
        .map(|k| format!("\"{}_us\":{:.1}", KINDS[k], us(k)))
        .chain((0..4).map(|k| format!("\"{}_cpu_us\":{:.1}", KINDS[k], cpu_us(k))))
        .collect();
    println!(
        "{{\"what\":\"primary\",\"groups\":{groups},\"caches\":\"{caches}\",\"history_from\":{from},\"history_to\":{to},\"trials\":{},{},\"trial_cpu_s\":{per_trial:.6},\"result_reply_bytes\":{},\"largest_reply_bytes\":{},\"band_cpu_s\":{cpu:.3}}}",
        b.count[3],
        fields.join(","),
        b.reply_bytes / b.count[3].max(1),
        b.largest_reply,
    );
}
