//! `aiperf comm-bench`: the interconnect profile. Sweeps message sizes and times, over a
//! communicator, the raw `MPI_Allreduce` out of place (`allreduce`) and in place
//! (`allreduce-in-place`: as a rule the best raw call, the exchange's limit), the
//! training's exchange through its one way in ([`crate::exchange::Exchange`]) — buckets
//! reduced where the gradients lie (`exchange`; `hierarchical`, the node-aware one), and
//! copied in from the tensors' memory first (`exchange-copy`) — and the in-place call a
//! second time (`control`: the bench's own resolution, an A/A comparison), reporting per size the time (the median over the
//! operations of the slowest rank's, beside the mean), algorithm bandwidth (bytes / time)
//! and bus bandwidth (algorithm bandwidth × 2(n−1)/n, the all-reduce's per-link traffic, as
//! nccl-tests define it), so interconnects and the training exchange can be compared. Each
//! method is also set against the in-place call operation by operation (`paired`): the
//! methods take turns within every iteration, in an order that changes from one iteration
//! to the next so that within an iteration no method always follows the same one, and the
//! ratio of two operations of the same iteration cancels the machine's drift between
//! iterations, which two medians taken apart do not.

use std::time::Instant;

use anyhow::{bail, Context};
use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::traits::Communicator;
use serde::Serialize;

use super::{init_mpi, once};
use crate::cli::CommBenchArgs;
use crate::exchange::{Exchange, ExchangeConfig, ExchangeMethod, Progress, RawComm};

/// One size of the sweep for one method, the same on every rank.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommRow {
    /// What was timed: `allreduce` (a raw MPI_Allreduce, out of place), `allreduce-in-place`
    /// (the raw call in place on the same buffer: as a rule the best), `exchange` (the
    /// training's flat exchange, in place where the gradients lie), `exchange-copy` (the
    /// copying path), `hierarchical` (`--exchange hierarchical`) or `control` (the in-place
    /// call again, in its own turn: how far two timings of one call differ here).
    pub method: &'static str,
    /// Ranks in the communicator.
    pub ranks: usize,
    /// Message bytes (f32 elements × 4).
    pub bytes: u64,
    /// Seconds per operation: the median over the timed operations of the slowest rank's
    /// time for each (an operation ends when its last rank is done).
    pub seconds: f64,
    /// The mean over the timed operations of the slowest rank's time.
    pub mean_seconds: f64,
    /// Algorithm bandwidth, bytes per second.
    pub algbw: f64,
    /// Bus bandwidth, bytes per second.
    pub busbw: f64,
    /// The median over the iterations of the in-place call's time divided by this
    /// method's in the same iteration: its speed against the in-place call (the best raw
    /// call wherever that one is the faster), measured in pairs of operations of the same
    /// iteration (1 for the in-place call itself).
    pub paired: f64,
    /// Every timed operation's slowest-rank seconds, in the order timed: operation `i` of
    /// each method ran in iteration `i`, so any two methods can be paired.
    pub times: Vec<f64>,
}

/// The pieces a bucketed exchange of `elems` elements sees: tensors of a ResNet's sizes
/// (a 1 MiB and a 4 MiB piece, then 256 KiB ones), so buckets close as in training.
fn pieces(elems: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut left = elems;
    for n in [1 << 18, 1 << 20]
        .into_iter()
        .chain(std::iter::repeat(1 << 16))
    {
        if left == 0 {
            break;
        }
        let n = n.min(left);
        out.push(n);
        left -= n;
    }
    out
}

/// The exchanges comm-bench times: flat and node-aware, built once for the sweep.
struct Exchanges<'c> {
    flat: Exchange<'c>,
    node_aware: Exchange<'c>,
}

/// One size's buffers: the values the copying path copies in (`src`, in pieces of `sizes`),
/// and the raw all-reduce's send and receive buffers.
struct Buffers {
    src: Vec<f32>,
    sizes: Vec<usize>,
    send: Vec<f32>,
    recv: Vec<f32>,
}

/// One operation of `method`: the raw all-reduce from `send` into `recv`, or in place on
/// `recv`; the training's exchange in place on `recv` where the gradients lie (`exchange`,
/// `hierarchical`: gradients are views of the buckets); or the copying path
/// (`exchange-copy`: `src`, in pieces of `sizes`, copied in bucket by bucket, as for CUDA
/// gradients staged through host memory).
fn operate<C: RawComm>(comm: &C, method: &str, ex: &Exchanges<'_>, b: &mut Buffers) {
    let Buffers {
        src,
        sizes,
        send,
        recv,
    } = b;
    let sizes = &sizes[..];
    let resident = |ex: &Exchange<'_>, recv: &mut [f32]| {
        ex.sum_host(sizes, recv, &mut |_, _| {}, Progress::After);
    };
    match method {
        "allreduce" => comm.all_reduce_into(&send[..], &mut recv[..], SystemOperation::sum()),
        "allreduce-in-place" | "control" => crate::exchange::allreduce(comm, recv),
        "exchange" => resident(&ex.flat, recv),
        "hierarchical" => resident(&ex.node_aware, recv),
        _ => {
            ex.flat.sum_copied(sizes, src, recv);
        }
    }
}

/// What comm-bench times (each iteration in the order [`turns`] gives).
const METHODS: [&str; 6] = [
    "allreduce",
    "allreduce-in-place",
    "exchange",
    "exchange-copy",
    "hierarchical",
    "control",
];

/// The methods' turn order in iteration `it`: row `it` of a Williams Latin square over
/// `METHODS` (rows 0, 1, n−1, 2, n−2, … shifted by the row's index, n even), so that over
/// every `METHODS.len()` iterations each method takes every place once and, within the
/// iterations, follows every other method exactly once. A method always timed after the
/// same one would carry what that one leaves behind — in caches, pages or the transport's
/// state — into its own time.
/// The same on every rank, so all make the same calls.
fn turns(it: usize) -> impl Iterator<Item = usize> {
    const N: usize = METHODS.len();
    const _: () = assert!(
        N.is_multiple_of(2),
        "a Williams square of one row per place needs N even"
    );
    (0..N).map(move |k| {
        let first = match k {
            0 => 0,
            k if k % 2 == 1 => k.div_ceil(2),
            k => N - k / 2,
        };
        (first + it) % N
    })
}

/// `allreduce-in-place`'s place in `METHODS`: the reference of the paired ratios.
const IN_PLACE: usize = 1;

/// Times `iters` operations of each method for each size in `sizes` (bytes, rounded down to
/// f32 elements) after `warmup` untimed ones; collective over `comm`. The methods take
/// turns within each size, so a drift of the machine's speed hits them alike.
pub fn sweep<C: RawComm>(
    comm: &C,
    sizes: &[u64],
    iters: usize,
    warmup: usize,
    cfg: &ExchangeConfig,
) -> Vec<CommRow> {
    let n = comm.size() as usize;
    let iters = iters.max(1);
    // Both exchanges built once for the sweep (the node-aware one splits `comm` by node),
    // after backward: comm-bench has no backward to overlap with.
    let with = |method| ExchangeConfig {
        method,
        overlap: false,
        ..*cfg
    };
    let named = "both methods are named, neither is auto";
    let ex = Exchanges {
        flat: Exchange::new(comm, &with(ExchangeMethod::Allreduce)).expect(named),
        node_aware: Exchange::new(comm, &with(ExchangeMethod::Hierarchical)).expect(named),
    };
    let mut rows = Vec::new();
    for &bytes in sizes {
        let elems = (bytes / 4).max(1) as usize;
        let mut buffers = Buffers {
            src: vec![1f32; elems],
            // Split once, outside the timed operations.
            sizes: pieces(elems),
            send: vec![1f32; elems],
            recv: vec![0f32; elems],
        };
        // Every buffer prepared alike, as the exchange's are: huge pages where allowed.
        for b in [&mut buffers.send, &mut buffers.recv] {
            crate::host::advise_huge_pages(b.as_mut_ptr().cast(), b.len() * 4);
        }
        for _ in 0..warmup {
            for m in METHODS {
                operate(comm, m, &ex, &mut buffers);
            }
        }
        // This rank's time of every operation, method-major.
        let mut mine = vec![0f64; METHODS.len() * iters];
        for it in 0..iters {
            for i in turns(it) {
                let m = METHODS[i];
                comm.barrier();
                let t = Instant::now();
                operate(comm, m, &ex, &mut buffers);
                mine[i * iters + it] = t.elapsed().as_secs_f64();
            }
        }
        // Each operation's slowest rank, in one reduction outside the timed ones.
        let mut slowest = vec![0f64; mine.len()];
        comm.all_reduce_into(&mine[..], &mut slowest[..], SystemOperation::max());
        rows.extend(rows_of(&slowest, iters, n, (elems * 4) as u64));
    }
    rows
}

/// One size's rows from its operations' slowest-rank times, method-major (`iters` per
/// method, in `METHODS` order), over `n` ranks.
fn rows_of(slowest: &[f64], iters: usize, n: usize, bytes: u64) -> Vec<CommRow> {
    let in_place = &slowest[IN_PLACE * iters..(IN_PLACE + 1) * iters];
    METHODS
        .into_iter()
        .zip(slowest.chunks(iters))
        .map(|(method, times)| {
            let (median, mean) = median_and_mean(times);
            let algbw = bytes as f64 / median.max(1e-12);
            CommRow {
                method,
                ranks: n,
                bytes,
                seconds: median,
                mean_seconds: mean,
                algbw,
                busbw: algbw * 2.0 * (n as f64 - 1.0) / n as f64,
                paired: paired(in_place, times),
                times: times.to_vec(),
            }
        })
        .collect()
}

/// The median over the iterations of `reference[i] / times[i]`: how fast `times`' method
/// ran against the reference's in the same iteration.
fn paired(reference: &[f64], times: &[f64]) -> f64 {
    let ratios = reference
        .iter()
        .zip(times)
        .map(|(r, t)| r / t.max(1e-12))
        .collect();
    crate::stats::median(ratios)
}

/// The median and the mean of `times`, not empty.
fn median_and_mean(times: &[f64]) -> (f64, f64) {
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    (crate::stats::median(times.to_vec()), mean)
}

/// The rows as a table in the manner of nccl-tests.
pub fn table(scope: &str, rows: &[CommRow]) -> String {
    let mut out = format!(
        "# {scope}: {} ranks\n#{:>13} {:>13} {:>12} {:>12} {:>12} {:>10}\n",
        rows.first().map_or(0, |r| r.ranks),
        "bytes",
        "method",
        "time us",
        "algbw GB/s",
        "busbw GB/s",
        "paired"
    );
    for r in rows {
        out.push_str(&format!(
            "{:>14} {:>13} {:>12.1} {:>12.3} {:>12.3} {:>9.2}x\n",
            r.bytes,
            r.method,
            r.seconds * 1e6,
            r.algbw / 1e9,
            r.busbw / 1e9,
            r.paired
        ));
    }
    out
}

/// `aiperf comm-bench`: all-reduce and exchange bandwidth over a sweep of sizes.
pub fn comm_bench(a: CommBenchArgs) -> anyhow::Result<()> {
    use mpi::topology::Color;
    if a.min_bytes == 0 || a.min_bytes > a.max_bytes || a.iters == 0 {
        bail!("--min-bytes must be in 1..=--max-bytes and --iters at least 1");
    }
    let (universe, _) = init_mpi()?;
    let world = universe.world();
    let sizes = a.sizes();
    let mut scopes = vec![(
        "world".to_string(),
        sweep(&world, &sizes, a.iters, a.warmup, &a.exchange_config()),
    )];
    if let Some(g) = a.group_size {
        if g == 0 || !(world.size() as usize).is_multiple_of(g) {
            // Every rank finds it alike: said once, by rank 0.
            let bad = anyhow::anyhow!("--group-size {g} must divide the {} ranks", world.size());
            return once(&world, Err(bad));
        }
        let color = Color::with_value(world.rank() / g as i32);
        let group = world
            .split_by_color(color)
            .context("splitting the world into groups")?;
        let rows = sweep(&group, &sizes, a.iters, a.warmup, &a.exchange_config());
        scopes.push((format!("groups of {g} ranks (group 0 shown)"), rows));
    }
    scopes.extend(node_scopes(&world, &sizes, &a)?);
    if world.rank() == 0 {
        for (scope, rows) in &scopes {
            if a.json {
                for r in rows {
                    let mut v = serde_json::to_value(r)?;
                    v["scope"] = serde_json::json!(scope);
                    println!("{v}");
                }
            } else {
                print!("{}", table(scope, rows));
            }
        }
    }
    Ok(())
}

/// When the world spans several nodes: the sweep within each node (shared memory; node 0
/// shown) and across nodes with one rank per node (the interconnect alone; the ranks of
/// local index 0 shown), so inter-node figures stand apart from intra-node ones.
fn node_scopes(
    world: &mpi::topology::SimpleCommunicator,
    sizes: &[u64],
    a: &CommBenchArgs,
) -> anyhow::Result<Vec<(String, Vec<CommRow>)>> {
    use mpi::topology::Color;
    let node = world.split_shared(world.rank());
    let mut nodes = 0i32;
    world.all_reduce_into(
        &i32::from(node.rank() == 0),
        &mut nodes,
        mpi::collective::SystemOperation::sum(),
    );
    if nodes < 2 {
        return Ok(Vec::new());
    }
    let within = sweep(&node, sizes, a.iters, a.warmup, &a.exchange_config());
    let across = world
        .split_by_color(Color::with_value(node.rank()))
        .context("splitting the world into one rank per node")?;
    let over = sweep(&across, sizes, a.iters, a.warmup, &a.exchange_config());
    Ok(vec![
        (
            format!("within a node ({} ranks, node 0 shown)", node.size()),
            within,
        ),
        (format!("across {nodes} nodes (one rank per node)"), over),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pieces_cover_the_message() {
        for elems in [1usize, 100, 1 << 18, (1 << 18) + 1, 10_000_000] {
            let p = pieces(elems);
            assert_eq!(p.iter().sum::<usize>(), elems);
            assert!(p.iter().all(|&n| n > 0));
        }
    }

    #[test]
    fn the_time_is_the_median_of_the_operations_beside_their_mean() {
        // One slow operation moves the mean, not the median.
        assert_eq!(median_and_mean(&[3.0, 1.0, 2.0]), (2.0, 2.0));
        let (median, mean) = median_and_mean(&[1.0, 9.0, 2.0, 4.0]);
        assert_eq!(median, 3.0);
        assert_eq!(mean, 4.0);
        assert_eq!(median_and_mean(&[5.0]), (5.0, 5.0));
    }

    #[test]
    fn each_method_gets_its_own_operations() {
        // Method i's three operations take i+1, i+2 and 10·(i+1) seconds.
        let iters = 3;
        let mut slowest = Vec::new();
        for i in 0..METHODS.len() {
            let base = i as f64 + 1.0;
            slowest.extend([base, base + 1.0, 10.0 * base]);
        }
        let rows = rows_of(&slowest, iters, 4, 1000);
        assert_eq!(rows.len(), METHODS.len());
        for (i, r) in rows.iter().enumerate() {
            let base = i as f64 + 1.0;
            assert_eq!(r.method, METHODS[i]);
            assert_eq!(r.seconds, base + 1.0, "{r:?}");
            assert!(
                (r.mean_seconds - (12.0 * base + 1.0) / 3.0).abs() < 1e-12,
                "{r:?}"
            );
            assert_eq!(r.algbw, 1000.0 / r.seconds);
            assert!((r.busbw - r.algbw * 1.5).abs() < 1e-9, "{r:?}");
        }
        assert_eq!(rows[5].method, "control");
    }

    #[test]
    fn paired_ratios_set_each_operation_against_the_in_place_call_of_its_iteration() {
        // The machine slows down 10x between iterations; method i always takes (i+1)/2 of
        // the in-place call's time in the same iteration, so it is 2/(i+1) as fast.
        let iters = 4;
        let drift = [1.0, 10.0, 1.0, 10.0];
        let mut slowest = Vec::new();
        for i in 0..METHODS.len() {
            slowest.extend(drift.iter().map(|d| d * (i as f64 + 1.0) / 2.0));
        }
        let rows = rows_of(&slowest, iters, 2, 64);
        for (i, r) in rows.iter().enumerate() {
            let want = 2.0 / (i as f64 + 1.0);
            assert!((r.paired - want).abs() < 1e-12, "{r:?}");
            assert_eq!(r.times.len(), iters);
        }
        assert_eq!(rows[IN_PLACE].method, "allreduce-in-place");
        assert_eq!(rows[IN_PLACE].paired, 1.0);
        // One disturbed operation moves neither.
        slowest[2 * iters] *= 50.0;
        let rows = rows_of(&slowest, iters, 2, 64);
        assert!((rows[2].paired - 2.0 / 3.0).abs() < 1e-12, "{:?}", rows[2]);
    }

    #[test]
    fn every_method_takes_every_turn_once_in_as_many_iterations() {
        let n = METHODS.len();
        let orders: Vec<Vec<usize>> = (0..=n).map(|it| turns(it).collect()).collect();
        assert_eq!(orders[0], [0, 1, 5, 2, 4, 3]);
        for place in 0..n {
            let mut at: Vec<usize> = orders[..n].iter().map(|o| o[place]).collect();
            at.sort();
            assert_eq!(at, (0..n).collect::<Vec<_>>(), "place {place}");
        }
        for o in &orders[..n] {
            let mut sorted = o.clone();
            sorted.sort();
            assert_eq!(
                sorted,
                (0..n).collect::<Vec<_>>(),
                "each method once: {o:?}"
            );
        }
        // Every method follows every other exactly once.
        let mut follows = std::collections::BTreeSet::new();
        for o in &orders[..n] {
            for w in o.windows(2) {
                assert!(follows.insert((w[0], w[1])), "{w:?} twice: {orders:?}");
            }
        }
        assert_eq!(follows.len(), n * (n - 1));
        assert_eq!(orders[n], orders[0], "the square repeats");
    }
}
