//! The monitor's samples (`group-<g>.h5`, dataset `monitor`) summarised for the score
//! report: accelerator utilisation and memory as NVML saw them, CPU utilisation and host
//! memory, over the scored window. A resource figure qualifies the score (how busy the
//! accelerators were); it never enters it.

use serde::Serialize;

use crate::schema::MonitorRow;
use crate::Run;

/// What the monitor recorded during the run. Figures are `None` (JSON `null`) when no sample
/// in the window measured them — accelerator figures without NVML, for example.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Resources {
    /// Samples in the window, over all groups.
    pub samples: usize,
    /// Of which measured the accelerators (NVML loaded).
    pub accel_samples: usize,
    /// Mean accelerator utilisation in [0, 1] (each sample is the mean over its node's
    /// devices).
    pub accel_util_mean: Option<f64>,
    /// Highest accelerator utilisation sampled.
    pub accel_util_max: Option<f64>,
    /// Most accelerator memory in use in one sample (a node's devices summed), bytes.
    pub accel_mem_peak_bytes: Option<f64>,
    /// Mean CPU utilisation in [0, 1] of the nodes sampled.
    pub cpu_util_mean: Option<f64>,
    /// Most host memory in use in one sample, bytes.
    pub host_mem_peak_bytes: Option<f64>,
}

/// Mean and maximum of the finite values.
fn mean_max(values: impl Iterator<Item = f64>) -> (usize, Option<f64>, Option<f64>) {
    let (mut n, mut sum, mut max) = (0usize, 0.0, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        n += 1;
        sum += v;
        max = max.max(v);
    }
    if n == 0 {
        (0, None, None)
    } else {
        (n, Some(sum / n as f64), Some(max))
    }
}

/// Summarises the rows of every group with `t0 <= time_s <= t_end`.
pub fn summarise(run: &Run, t_end: f64) -> Resources {
    let t0 = run.info.start_time_s;
    let rows: Vec<&MonitorRow> = run
        .groups
        .iter()
        .flat_map(|g| g.monitor.iter())
        .filter(|m| m.time_s >= t0 && m.time_s <= t_end)
        .collect();
    let (accel_samples, accel_util_mean, accel_util_max) =
        mean_max(rows.iter().map(|m| m.accel_util));
    let (_, cpu_util_mean, _) = mean_max(rows.iter().map(|m| m.cpu_util));
    Resources {
        samples: rows.len(),
        accel_samples,
        accel_util_mean,
        accel_util_max,
        accel_mem_peak_bytes: mean_max(rows.iter().map(|m| m.accel_mem_bytes)).2,
        cpu_util_mean,
        host_mem_peak_bytes: mean_max(rows.iter().map(|m| m.host_mem_bytes)).2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_and_peaks_skip_unmeasured_values() {
        let (n, mean, max) = mean_max([0.2, f64::NAN, 0.6, 1.0].into_iter());
        assert_eq!(n, 3);
        assert!((mean.unwrap() - 0.6).abs() < 1e-12);
        assert_eq!(max, Some(1.0));
        assert_eq!(mean_max([f64::NAN].into_iter()), (0, None, None));
    }
}
