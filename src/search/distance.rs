//! The edit distance between architecture descriptors, as NNI's network-morphism tuner
//! defines it: Levenshtein over the main-chain layers (insert/delete 1, substitute by
//! [`layer_distance`]) plus the skip-connection distance (Hungarian matching of
//! [`skip_distance`] plus the difference in count), with λ = 1.

use pathfinding::kuhn_munkres::kuhn_munkres_min;
use pathfinding::matrix::Matrix;

use crate::arch::{ChainLayer, Descriptor, LayerKind, Skip};

/// NNI's `KERNEL_LAMBDA`: weight of the skip-connection part.
pub const KERNEL_LAMBDA: f64 = 1.0;

/// `|a − b| / max(a, b)`, 0 when both are 0.
fn relative(a: u32, b: u32) -> f64 {
    let m = a.max(b);
    if m == 0 {
        0.0
    } else {
        f64::from(a.abs_diff(b)) / f64::from(m)
    }
}

/// Distance of two layers in [0, 1]: 1 for different kinds; for convolutions the mean
/// relative difference of (width, kernel, stride), for pooling of (padding, kernel, stride)
/// (NNI); for dense layers the relative width difference (NNI counts 0, which would make a
/// widened dense layer a duplicate); 0 for other layers of the same kind.
pub fn layer_distance(a: &ChainLayer, b: &ChainLayer) -> f64 {
    if a.kind != b.kind {
        return 1.0;
    }
    match a.kind {
        LayerKind::Conv2d => {
            (relative(a.width, b.width)
                + relative(a.kernel, b.kernel)
                + relative(a.stride, b.stride))
                / 3.0
        }
        LayerKind::MaxPool => {
            (relative(a.padding, b.padding)
                + relative(a.kernel, b.kernel)
                + relative(a.stride, b.stride))
                / 3.0
        }
        LayerKind::Dense => relative(a.width, b.width),
        _ => 0.0,
    }
}

/// A layer packed into 64 bits (kind, width, kernel, stride, padding): equal keys mean
/// equal layers, and different kinds differ in the top byte.
fn key(l: &ChainLayer) -> u64 {
    let kind = l.kind as u64;
    kind << 56
        | u64::from(l.width.min(0xff_ffff)) << 32
        | u64::from(l.kernel.min(0xff)) << 16
        | u64::from(l.stride.min(0xff)) << 8
        | u64::from(l.padding.min(0xff))
}

/// Levenshtein distance over layer sequences (insert/delete 1, substitute by
/// [`layer_distance`]). Exact, but fast for the similar sequences a search compares:
/// - equal leading and trailing layers are stripped (they align at cost 0 in some optimal
///   alignment, as the layer distance is a metric; a test checks this against the full table);
/// - the layers are numbered by their distinct values and the substitution costs of those
///   few values tabulated once, so the table's inner loop is a lookup;
/// - long sequences are compared in a diagonal band of half-width k, starting from
///   max(16, length difference) and doubled until the result is at most k — a path that
///   leaves the band has at least k + 1 insertions or deletions, so it cannot be optimal.
pub fn layers_distance(a: &[ChainLayer], b: &[ChainLayer]) -> f64 {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (a, b) = (&a[prefix..], &b[prefix..]);
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (a, b) = (&a[..a.len() - suffix], &b[..b.len() - suffix]);
    if a.is_empty() || b.is_empty() {
        return a.len().max(b.len()) as f64;
    }
    // Distinct layer values and their substitution costs.
    let mut distinct: Vec<u64> = a.iter().chain(b).map(key).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let layer_of: Vec<&ChainLayer> = distinct
        .iter()
        .map(|k| a.iter().chain(b).find(|l| key(l) == *k).expect("present"))
        .collect();
    let nd = distinct.len();
    let cost: Vec<f64> = (0..nd * nd)
        .map(|i| layer_distance(layer_of[i / nd], layer_of[i % nd]))
        .collect();
    let id = |l: &ChainLayer| distinct.binary_search(&key(l)).expect("present");
    let ia: Vec<usize> = a.iter().map(|l| id(l) * nd).collect();
    let ib: Vec<usize> = b.iter().map(id).collect();
    let longest = a.len().max(b.len());
    let mut band = a.len().abs_diff(b.len()).max(16);
    loop {
        if 4 * band + 2 >= longest {
            return banded(&ia, &ib, &cost, longest);
        }
        let d = banded(&ia, &ib, &cost, band);
        if d <= band as f64 {
            return d;
        }
        band *= 2;
    }
}

/// The edit-distance table restricted to |i − j| ≤ `band` (the full table when `band` is at
/// least the longer length). `ia` holds row ids premultiplied by the id count.
fn banded(ia: &[usize], ib: &[usize], cost: &[f64], band: usize) -> f64 {
    let m = ib.len();
    let mut prev: Vec<f64> = (0..=m)
        .map(|j| if j <= band { j as f64 } else { f64::INFINITY })
        .collect();
    let mut cur = vec![f64::INFINITY; m + 1];
    for (i, &row) in ia.iter().enumerate() {
        let i = i + 1;
        let lo = i.saturating_sub(band).max(1);
        let hi = (i + band).min(m);
        cur[lo - 1] = if lo == 1 && i <= band {
            i as f64
        } else {
            f64::INFINITY
        };
        let costs = &cost[row..];
        // cur[j] = min(prev[j] + 1, prev[j−1] + sub, cur[j−1] + 1). The first two terms do not
        // depend on each other across j; writing v[j] = that minimum − j turns the last term
        // into a running minimum: cur[j] − j = min(v[j], cur[j−1] − (j − 1)).
        let mut run = cur[lo - 1] - (lo - 1) as f64;
        for j in lo..=hi {
            let v = (prev[j] + 1.0).min(prev[j - 1] + costs[ib[j - 1]]) - j as f64;
            run = run.min(v);
            cur[j] = run + j as f64;
        }
        if hi < m {
            cur[hi + 1] = f64::INFINITY;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[m]
}

/// The full dynamic-programming table, two rows at a time (the reference for the tests).
#[cfg(test)]
pub(crate) fn levenshtein(a: &[ChainLayer], b: &[ChainLayer]) -> f64 {
    let mut prev: Vec<f64> = (0..=b.len()).map(|j| j as f64).collect();
    let mut cur = vec![0.0; b.len() + 1];
    for (i, x) in a.iter().enumerate() {
        cur[0] = (i + 1) as f64;
        for (j, y) in b.iter().enumerate() {
            cur[j + 1] = (prev[j + 1] + 1.0)
                .min(cur[j] + 1.0)
                .min(prev[j] + layer_distance(x, y));
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// NNI's distance of two skip connections: 1 for different kinds, else
/// `(|from_a − from_b| + |len_a − len_b|) / (max(from) + max(len))` with len = to − from.
pub fn skip_distance(a: &Skip, b: &Skip) -> f64 {
    if a.kind != b.kind {
        return 1.0;
    }
    let (la, lb) = (a.to.abs_diff(a.from), b.to.abs_diff(b.from));
    let denominator = a.from.max(b.from) + la.max(lb);
    if denominator == 0 {
        return 0.0;
    }
    (a.from.abs_diff(b.from) + la.abs_diff(lb)) as f64 / denominator as f64
}

/// Fixed-point scale for the Hungarian matching (which works on integers).
const SCALE: f64 = 1e12;

/// Minimum-cost matching of the skip connections plus the difference in their counts.
pub fn skips_distance(a: &[Skip], b: &[Skip]) -> f64 {
    let (rows, cols) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let unmatched = (cols.len() - rows.len()) as f64;
    if rows.is_empty() {
        return unmatched;
    }
    let weights = Matrix::from_fn(rows.len(), cols.len(), |(i, j)| {
        (skip_distance(&rows[i], &cols[j]) * SCALE).round() as i64
    });
    let (total, _) = kuhn_munkres_min(&weights);
    total as f64 / SCALE + unmatched
}

/// The edit distance: layers + λ · skip connections.
pub fn edit_distance(a: &Descriptor, b: &Descriptor) -> f64 {
    layers_distance(&a.layers, &b.layers) + KERNEL_LAMBDA * skips_distance(&a.skips, &b.skips)
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::arch::{cifar_resnet, CifarResnetConfig, Shape, SkipKind};
    use crate::search::{random_morphism, Limits};

    fn conv(width: u32, kernel: u32, stride: u32) -> ChainLayer {
        ChainLayer {
            kind: LayerKind::Conv2d,
            width,
            kernel,
            stride,
            padding: kernel / 2,
        }
    }

    fn relu() -> ChainLayer {
        ChainLayer {
            kind: LayerKind::Relu,
            width: 0,
            kernel: 0,
            stride: 0,
            padding: 0,
        }
    }

    #[test]
    fn layer_distance_follows_nni() {
        assert_eq!(layer_distance(&conv(64, 3, 1), &conv(64, 3, 1)), 0.0);
        assert_eq!(layer_distance(&conv(64, 3, 1), &relu()), 1.0);
        // Width 64 vs 128: 0.5; kernel 3 vs 5: 0.4; stride equal: mean 0.3.
        assert!((layer_distance(&conv(64, 3, 1), &conv(128, 5, 1)) - 0.3).abs() < 1e-12);
    }

    #[test]
    fn levenshtein_counts_inserts_and_substitutions() {
        let a = vec![conv(16, 3, 1), relu(), conv(32, 3, 2)];
        let mut b = a.clone();
        b.insert(1, conv(16, 5, 1));
        assert_eq!(layers_distance(&a, &b), 1.0);
        b[3] = conv(64, 3, 2); // 32 → 64: 0.5/3
        assert!((layers_distance(&a, &b) - (1.0 + 0.5 / 3.0)).abs() < 1e-12);
        assert_eq!(layers_distance(&[], &a), 3.0);
    }

    #[test]
    fn skip_distance_and_matching_follow_nni() {
        let s = |from, to| Skip {
            from,
            to,
            kind: SkipKind::Add,
        };
        assert_eq!(skip_distance(&s(2, 6), &s(2, 6)), 0.0);
        // |2−4| + |4−4| over max(2,4) + 4.
        assert!((skip_distance(&s(2, 6), &s(4, 8)) - 2.0 / 8.0).abs() < 1e-12);
        let c = Skip {
            from: 2,
            to: 6,
            kind: SkipKind::Concat,
        };
        assert_eq!(skip_distance(&s(2, 6), &c), 1.0);
        // Matching pairs each with its twin, plus one unmatched.
        let a = [s(10, 14), s(2, 6)];
        let b = [s(2, 6), s(10, 14), s(20, 30)];
        assert!((skips_distance(&a, &b) - 1.0).abs() < 1e-9);
        assert!((skips_distance(&b, &a) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn banded_table_equals_the_full_table_on_random_sequences() {
        // Unrelated random sequences of different lengths force the band to widen.
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let layer = |rng: &mut ChaCha8Rng| match rng.random_range(0..4) {
            0 => conv(
                [8, 16, 32][rng.random_range(0..3)],
                [1, 3, 5][rng.random_range(0..3)],
                rng.random_range(1..3),
            ),
            1 => relu(),
            2 => ChainLayer {
                kind: LayerKind::BatchNorm,
                width: 0,
                kernel: 0,
                stride: 0,
                padding: 0,
            },
            _ => ChainLayer {
                kind: LayerKind::Dense,
                width: rng.random_range(1..20),
                kernel: 0,
                stride: 0,
                padding: 0,
            },
        };
        for _ in 0..300 {
            let (la, lb) = (rng.random_range(0..90), rng.random_range(0..90));
            let a: Vec<ChainLayer> = (0..la).map(|_| layer(&mut rng)).collect();
            let b: Vec<ChainLayer> = (0..lb).map(|_| layer(&mut rng)).collect();
            let (fast, full) = (layers_distance(&a, &b), levenshtein(&a, &b));
            assert!(
                (fast - full).abs() < 1e-9,
                "{fast} vs {full} ({la} vs {lb} layers)"
            );
        }
    }

    #[test]
    fn stripping_equal_ends_never_changes_the_distance() {
        // Random morphism chains from one start share long prefixes and suffixes: compare
        // the stripped distance with the full table on many pairs.
        let start = cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut descriptors = vec![start.descriptor()];
        let mut g = start.clone();
        for i in 0..60 {
            if i % 6 == 0 {
                g = start.clone();
            }
            let kernel = [3, 5, 7][rng.random_range(0..3)];
            let (_, next) = random_morphism(&g, kernel, &Limits::default(), &mut rng, 20).unwrap();
            descriptors.push(next.descriptor());
            g = next;
        }
        for a in &descriptors {
            for b in &descriptors {
                let full = levenshtein(&a.layers, &b.layers);
                assert!((layers_distance(&a.layers, &b.layers) - full).abs() < 1e-9);
            }
        }
    }

    #[test]
    fn distance_below_threshold_means_equal_descriptors() {
        // De-duplication compares descriptors for equality: for integer attributes below
        // 33,333, any difference costs more than 1e-5.
        let a =
            cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10).descriptor();
        let mut b = a.clone();
        assert_eq!(edit_distance(&a, &b), 0.0);
        b.layers[0].width = 17;
        assert!(edit_distance(&a, &b) > 1e-5);
        let mut c = a.clone();
        c.skips[0].from += 1;
        assert!(edit_distance(&a, &c) > 1e-5);
        let (w1, w2) = (conv(33_332, 3, 1), conv(33_333, 3, 1));
        assert!(layer_distance(&w1, &w2) > 1e-5);
    }
}
