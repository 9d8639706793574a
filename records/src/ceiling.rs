//! The machine's measured ceiling (docs/design.md §5, schema 5): each accelerator's dense
//! matrix-product rate in the run's precision, measured at start-up and sealed (attribute
//! `ceilings`), and the efficiency the score reports beside it — sustained OPS over the sum
//! of the ceilings, the benchmark's Rmax/Rpeak. Operations count a multiply-add as two, as
//! the op counts do (a product of two n×n matrices is 2n³ operations).

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
    /// The precision measured: the run's (`fp32`, `bf16`, `fp16`).
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

/// The sum of the accelerators' matrix-product ceilings, operations per second.
pub fn total(ceilings: &[Ceiling]) -> f64 {
    ceilings.iter().map(|c| c.gemm_ops_per_s).sum()
}

/// Sustained `ops_per_s` as a fraction of the summed ceilings (`None` without ceilings).
pub fn efficiency(ops_per_s: f64, ceilings: &[Ceiling]) -> Option<f64> {
    let t = total(ceilings);
    (t > 0.0).then(|| ops_per_s / t)
}

/// How the ceilings were measured, in one line (for the score).
pub fn describe(ceilings: &[Ceiling]) -> String {
    let Some(c) = ceilings.first() else {
        return "not recorded".into();
    };
    let same = ceilings
        .iter()
        .all(|d| (d.precision.as_str(), d.gemm_n) == (c.precision.as_str(), c.gemm_n));
    let spread = |f: fn(&Ceiling) -> f64| {
        let lo = ceilings.iter().map(f).fold(f64::INFINITY, f64::min);
        let hi = ceilings.iter().map(f).fold(0.0, f64::max);
        let ops = |v: f64| format!("{}OPS", crate::units::si(v));
        if (hi - lo) <= 0.005 * hi {
            ops(hi)
        } else {
            format!("{}–{}", ops(lo), ops(hi))
        }
    };
    format!(
        "{} accelerator(s) × {} each: best of {} {} matrix products n={}{}, at start-up on the run's ranks and threads (a {} ran at {})",
        ceilings.len(),
        spread(|c| c.gemm_ops_per_s),
        c.reps,
        c.precision,
        c.gemm_n,
        if same { "" } else { " (precisions or sizes differ by rank)" },
        c.conv,
        spread(|c| c.conv_ops_per_s),
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
    fn efficiency_divides_by_the_summed_ceilings() {
        let v = vec![c(1, 100e9), c(2, 300e9)];
        assert_eq!(total(&v), 400e9);
        assert_eq!(efficiency(100e9, &v), Some(0.25));
        assert_eq!(efficiency(1.0, &[]), None);
        let text = serde_json::to_string(&v).unwrap();
        assert_eq!(parse(&text).unwrap(), v);
        let d = describe(&v);
        assert!(
            d.starts_with("2 accelerator(s) × 100.000 GOPS–300.000 GOPS each: best of 5 bf16"),
            "{d}"
        );
        assert!(parse(&text.replace("100000000000.0", "-1.0"))
            .unwrap_err()
            .contains("rank 1"));
        assert!(parse("{}").is_err());
    }
}
