//! Search benchmark (run by `scripts/bench/bench-search`, not a test): time to propose one new
//! architecture from trained histories of 10, 50 and 200 models, on 1 and 2 threads, with the
//! search work done (annealing steps, neighbours, acquisitions, distances); and time per TPE
//! suggestion at 100 observations. Prints one JSON object per measurement.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use aiperf::arch::{cifar_resnet, CifarResnetConfig, Graph, Shape};
use aiperf::search::sim::synthetic_accuracy;
use aiperf::search::{
    random_morphism, BayesConfig, BayesOptimizer, Hparams, Limits, Observed, Space, Tpe, TpeConfig,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` distinct trained models: random morphism walks from `start` (CIFAR-shaped), restarting
/// now and then, with synthetic accuracies.
fn history(start: &Graph, n: usize) -> Vec<Observed> {
    let start = start.clone();
    let mut rng = ChaCha8Rng::seed_from_u64(2020);
    let mut out: Vec<Observed> = Vec::new();
    let mut known = HashSet::new();
    let mut g = start.clone();
    let h = Hparams {
        batch_size: 64,
        kernel_size: 3,
    };
    while out.len() < n {
        let d = g.descriptor();
        if known.insert(d.clone()) {
            out.push(Observed {
                id: out.len() as u64,
                accuracy: synthetic_accuracy(&g, h, 1),
                graph: Arc::new(g.clone()),
                descriptor: d,
            });
        }
        let kernel = [3, 5, 7][rng.random_range(0..3)];
        g = match random_morphism(&g, kernel, &Limits::default(), &mut rng, 20) {
            Some((_, next)) if rng.random_bool(0.85) => next,
            _ => start.clone(),
        };
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The history-size sweep (`SWEEP=100,500,...`): per size and fitting-set bound, the cold
/// first proposal (every distance of the fit computed) and the steady state — REPS
/// proposals, each after one more trained model arrived, as in a run.
fn sweep(sizes: &str, reps: u64) {
    let start = cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10);
    let max: usize = sizes
        .split(',')
        .filter_map(|s| s.parse().ok())
        .max()
        .unwrap_or(0);
    let all = history(&start, max + reps as usize);
    // Unbounded fits beyond UNBOUNDED_UP_TO models take too long to sweep.
    let unbounded_up_to: usize = env_or("UNBOUNDED_UP_TO", 1000);
    for n in sizes.split(',').filter_map(|s| s.parse::<usize>().ok()) {
        for max_fit in [aiperf::search::bayes::MAX_FIT, usize::MAX] {
            if max_fit == usize::MAX && n > unbounded_up_to {
                continue;
            }
            let opt = BayesOptimizer::new(BayesConfig {
                threads: env_or("THREADS", 2),
                seed: 1,
                max_fit,
                ..BayesConfig::default()
            })
            .unwrap();
            let t = Instant::now();
            let first = opt
                .propose(&all[..n], &HashSet::new(), 3, 0)
                .expect("a proposal");
            let cold_s = t.elapsed().as_secs_f64();
            let mut times = Vec::new();
            let mut last = first.stats;
            for k in 1..=reps {
                let t = Instant::now();
                let p = opt
                    .propose(&all[..n + k as usize], &HashSet::new(), 3, k)
                    .expect("a proposal");
                times.push(t.elapsed().as_secs_f64());
                last = p.stats;
            }
            let bound = if max_fit == usize::MAX { 0 } else { max_fit };
            println!(
                "{{\"impl\":\"aiperf\",\"what\":\"history_sweep\",\"history\":{n},\"max_fit\":{bound},\"fitted\":{},\"cold_seconds\":{cold_s:.6},\"cold_distances\":{},\"seconds\":{:.6},\"distances\":{},\"acquisitions\":{}}}",
                last.fitted,
                first.stats.distances,
                median(times),
                last.distances,
                last.acquisitions
            );
        }
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let reps: u64 = env_or("REPS", 5);
    if let Ok(sizes) = std::env::var("SWEEP") {
        return sweep(&sizes, reps);
    }
    // ResNet-20 (a 60-layer main chain), and a two-block ResNet whose 19-layer chain is as
    // long as NNI's default CNN's, for per-work comparisons.
    let starts = [
        (
            "resnet20",
            cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10),
        ),
        (
            "resnet-2block",
            cifar_resnet(
                &CifarResnetConfig {
                    blocks: vec![1, 1],
                    width: 16,
                },
                Shape::new(3, 32, 32),
                10,
            ),
        ),
    ];
    for (name, start) in &starts {
        for n in [10usize, 50, 200] {
            let h = history(start, n);
            let mean_layers =
                h.iter().map(|o| o.descriptor.layers.len()).sum::<usize>() as f64 / n as f64;
            // docs/design.md's cooling 0.5 (14 annealing steps) and NNI's 0.9 (88 steps).
            for (cooling, threads) in [(0.5, 1usize), (0.5, 2), (0.9, 1), (0.9, 2)] {
                let cfg = BayesConfig {
                    threads,
                    cooling,
                    seed: 1,
                    ..BayesConfig::default()
                };
                let opt = BayesOptimizer::new(cfg).unwrap();
                // The first proposal also computes the history's pairwise distances (cached after).
                let t = Instant::now();
                let first = opt.propose(&h, &HashSet::new(), 3, 0).expect("a proposal");
                let cold_s = t.elapsed().as_secs_f64();
                let mut times = Vec::new();
                let mut stats = Vec::new();
                for call in 1..=reps {
                    let t = Instant::now();
                    let p = opt
                        .propose(&h, &HashSet::new(), 3, call)
                        .expect("a proposal");
                    times.push(t.elapsed().as_secs_f64());
                    stats.push(p.stats);
                }
                let s = stats[stats.len() / 2];
                println!(
                "{{\"impl\":\"aiperf\",\"what\":\"generate\",\"start\":\"{name}\",\"history\":{n},\"threads\":{threads},\"cooling\":{cooling},\"mean_chain_layers\":{mean_layers:.1},\"seconds\":{:.6},\"first_call_seconds\":{cold_s:.6},\"first_call_distances\":{},\"annealing_steps\":{},\"expansions\":{},\"neighbours\":{},\"acquisitions\":{},\"distances\":{}}}",
                median(times),
                first.stats.distances,
                s.annealing_steps,
                s.expansions,
                s.neighbours,
                s.acquisitions,
                s.distances
            );
            }
        }
    }
    // TPE: time per suggestion with 100 observations.
    let mut tpe = Tpe::new(TpeConfig::default(), Space::default()).unwrap();
    for i in 0..100u32 {
        let h = tpe.suggest();
        tpe.observe(h, f64::from((h.batch_size + 7 * i) % 97) / 97.0);
    }
    let times: Vec<f64> = (0..200)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(tpe.suggest());
            t.elapsed().as_secs_f64()
        })
        .collect();
    println!(
        "{{\"impl\":\"aiperf\",\"what\":\"tpe_suggest\",\"observations\":100,\"seconds\":{:.9}}}",
        median(times)
    );
}
