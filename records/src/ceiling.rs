//! The machine's measured ceiling (docs/design.md §5): each accelerator's dense
//! matrix-product rate, measured at start-up and sealed (attribute `ceilings`) — from schema
//! 6 in every precision the accelerator computes natively, in schema 5 in the run's precision
//! only — and the efficiency the score reports beside it: sustained OPS over the sum, over
//! the accelerators, of each one's fastest ceiling (the machine's Rpeak analogue, whatever
//! precision the run chose), the benchmark's Rmax/Rpeak. Operations count a multiply-add as
//! two, as the op counts do (a product of two n×n matrices is 2n³ operations).

use serde::{Deserialize, Serialize};

/// One accelerator's measured ceiling.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ceiling {
    /// The world rank that trains on it.
    pub rank: u32,
    /// Its host.
    pub host: String,
    /// The device (`cpu`, `cuda:0`).
    pub device: String,
    /// The precision measured (`fp32`, `bf16`, `fp16`): one of the accelerator's native
    /// ones (schema 6), or the run's (schema 5).
    pub precision: String,
    /// Intra-op threads of the measurement (the rank's training threads).
    pub threads: u32,
    /// Order n of the square matrix product.
    pub gemm_n: u32,
    /// The best rate of the matrix product over the repetitions, operations per second.
    pub gemm_ops_per_s: f64,
    /// The convolution measured beside it (for the record; not the ceiling).
    pub conv: String,
    /// Its best rate, operations per second.
    pub conv_ops_per_s: f64,
    /// Timed repetitions of each (after one untimed).
    pub reps: u32,
}

/// Parses the `ceilings` attribute.
pub fn parse(json: &str) -> Result<Vec<Ceiling>, String> {
    let v: Vec<Ceiling> =
        serde_json::from_str(json).map_err(|e| format!("not a JSON list of ceilings ({e})"))?;
    if let Some(c) = v
        .iter()
        .find(|c| !(c.gemm_ops_per_s.is_finite() && c.gemm_ops_per_s > 0.0))
    {
        return Err(format!(
            "rank {}'s ceiling {} is not a positive rate",
            c.rank, c.gemm_ops_per_s
        ));
    }
    Ok(v)
}

/// The ranks that recorded a ceiling, ascending, each once.
pub fn ranks(ceilings: &[Ceiling]) -> Vec<u32> {
    let mut r: Vec<u32> = ceilings.iter().map(|c| c.rank).collect();
    r.sort_unstable();
    r.dedup();
    r
}

/// The machine's ceiling: the sum over the accelerators of each one's fastest recorded
/// matrix-product rate, operations per second (summed in rank order).
pub fn total(ceilings: &[Ceiling]) -> f64 {
    ranks(ceilings)
        .iter()
        .map(|&r| {
            ceilings
                .iter()
                .filter(|c| c.rank == r)
                .map(|c| c.gemm_ops_per_s)
                .fold(0.0, f64::max)
        })
        .sum()
}

/// The sum over the accelerators of the ceiling in `precision`, operations per second
/// (`None` when some accelerator recorded none in it).
pub fn total_in(ceilings: &[Ceiling], precision: &str) -> Option<f64> {
    ranks(ceilings)
        .iter()
        .map(|&r| {
            ceilings
                .iter()
                .find(|c| c.rank == r && c.precision == precision)
                .map(|c| c.gemm_ops_per_s)
        })
        .sum()
}

/// Sustained `ops_per_s` as a fraction of the machine's ceiling [`total`] (`None` without
/// ceilings).
pub fn efficiency(ops_per_s: f64, ceilings: &[Ceiling]) -> Option<f64> {
    let t = total(ceilings);
    (t > 0.0).then(|| ops_per_s / t)
}

/// The precisions recorded, in the order first seen.
fn precisions(ceilings: &[Ceiling]) -> Vec<&str> {
    let mut v: Vec<&str> = Vec::new();
    for c in ceilings {
        if !v.contains(&c.precision.as_str()) {
            v.push(&c.precision);
        }
    }
    v
}

/// How the ceilings were measured, in one line (for the score): per precision, the
/// accelerators' spread of matrix-product and convolution rates.
pub fn describe(ceilings: &[Ceiling]) -> String {
    let Some(c) = ceilings.first() else {
        return "not recorded".into();
    };
    let spread = |v: &[&Ceiling], f: fn(&Ceiling) -> f64| {
        let lo = v.iter().map(|c| f(c)).fold(f64::INFINITY, f64::min);
        let hi = v.iter().map(|c| f(c)).fold(0.0, f64::max);
        let ops = |v: f64| format!("{}OPS", crate::units::si(v));
        if (hi - lo) <= 0.005 * hi {
            ops(hi)
        } else {
            format!("{}–{}", ops(lo), ops(hi))
        }
    };
    let per: Vec<String> = precisions(ceilings)
        .into_iter()
        .map(|p| {
            let v: Vec<&Ceiling> = ceilings.iter().filter(|c| c.precision == p).collect();
            format!(
                "{p} {} (convolution {})",
                spread(&v, |c| c.gemm_ops_per_s),
                spread(&v, |c| c.conv_ops_per_s)
            )
        })
        .collect();
    let same = ceilings.iter().all(|d| d.gemm_n == c.gemm_n);
    format!(
        "{} accelerator(s), each the best of {} matrix products n={}{} at start-up on the run's ranks and threads: {}",
        ranks(ceilings).len(),
        c.reps,
        c.gemm_n,
        if same { "" } else { " (sizes differ by rank)" },
        per.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(rank: u32, g: f64) -> Ceiling {
        Ceiling {
            rank,
            host: "n".into(),
            device: "cpu".into(),
            precision: "bf16".into(),
            threads: 1,
            gemm_n: 2048,
            gemm_ops_per_s: g,
            conv: "3×3 convolution".into(),
            conv_ops_per_s: g / 2.0,
            reps: 5,
        }
    }

    #[test]
    fn efficiency_divides_by_the_summed_fastest_ceilings() {
        let v = vec![c(1, 100e9), c(2, 300e9)];
        assert_eq!(total(&v), 400e9);
        assert_eq!(efficiency(100e9, &v), Some(0.25));
        assert_eq!(efficiency(1.0, &[]), None);
        let text = serde_json::to_string(&v).unwrap();
        assert_eq!(parse(&text).unwrap(), v);
        let d = describe(&v);
        assert!(
            d.starts_with(
                "2 accelerator(s), each the best of 5 matrix products n=2048 at start-up"
            ),
            "{d}"
        );
        assert!(
            d.ends_with("bf16 100.000 GOPS–300.000 GOPS (convolution 50.000 GOPS–150.000 GOPS)"),
            "{d}"
        );
        assert!(parse(&text.replace("100000000000.0", "-1.0"))
            .unwrap_err()
            .contains("rank 1"));
        assert!(parse("{}").is_err());
    }

    #[test]
    fn the_machine_ceiling_takes_each_accelerators_fastest_precision() {
        // bf16 slower than fp32 on rank 1 (AVX-512-BF16 without AMX), faster on rank 2.
        let mut fp32 = c(1, 150e9);
        fp32.precision = "fp32".into();
        let mut fp32_2 = c(2, 100e9);
        fp32_2.precision = "fp32".into();
        let v = vec![c(1, 60e9), fp32, c(2, 300e9), fp32_2];
        assert_eq!(ranks(&v), [1, 2]);
        assert_eq!(total(&v), 450e9);
        assert_eq!(efficiency(45e9, &v), Some(0.1));
        assert_eq!(total_in(&v, "fp32"), Some(250e9));
        assert_eq!(total_in(&v, "bf16"), Some(360e9));
        assert_eq!(total_in(&v, "fp16"), None);
        let d = describe(&v);
        assert!(d.starts_with("2 accelerator(s)"), "{d}");
        assert!(
            d.contains("bf16 60.000 GOPS–300.000 GOPS")
                && d.contains("; fp32 100.000 GOPS–150.000 GOPS"),
            "{d}"
        );
    }
}
