//! Measuring an accelerator's ceiling (docs/design.md §5): the best rate of a square matrix
//! product in a precision — the denominator of the efficiency the score reports, as HPL
//! sets Rmax against Rpeak — and, for the record, of a 3×3 convolution in channels-last
//! order. Measured by `aiperf doctor` and by every training rank of `aiperf run` at
//! start-up, with the rank's own threads, concurrently (as the ranks train).

use std::time::Instant;

use aiperf_records::ceiling::Ceiling;
use tch::{Device, Kind, Tensor};

use crate::train::{MemoryFormat, Precision};

/// Timed repetitions of each measurement (after one untimed).
pub const REPS: u32 = 5;

/// The order of the matrix product: large enough to reach a CPU core's or a GPU's peak
/// (on GPUs the product must fill every multiprocessor), small enough to take well under a
/// second on one core.
fn gemm_n(device: Device) -> i64 {
    if device.is_cuda() {
        8192
    } else {
        2048
    }
}

/// The convolution: ResNet's first-stage 3×3 layer (64→64 channels, 56×56), on a batch
/// of 32 on a processor and 256 on a GPU.
fn conv_shape(device: Device) -> [i64; 4] {
    [if device.is_cuda() { 256 } else { 32 }, 64, 56, 56]
}

/// The element type `precision` computes in.
fn kind(precision: Precision) -> Result<Kind, String> {
    match precision {
        Precision::Fp32 => Ok(Kind::Float),
        Precision::Bf16 => Ok(Kind::BFloat16),
        Precision::Fp16 => Ok(Kind::Half),
        Precision::Auto => Err("the ceiling is measured in a resolved precision, not auto".into()),
    }
}

/// The best rate of `f` (which does `ops` operations) over [`REPS`] timed runs.
fn best_rate(
    device: Device,
    ops: f64,
    f: impl Fn() -> Result<Tensor, tch::TchError>,
) -> Result<f64, String> {
    let sync = || {
        if let Device::Cuda(i) = device {
            tch::Cuda::synchronize(i as i64);
        }
    };
    let torch = |e: tch::TchError| format!("libtorch: {e}");
    let _ = f().map_err(torch)?;
    sync();
    let mut best = f64::INFINITY;
    for _ in 0..REPS {
        let t = Instant::now();
        let out = f().map_err(torch)?;
        sync();
        best = best.min(t.elapsed().as_secs_f64());
        drop(out);
    }
    Ok(ops / best)
}

/// This rank's ceiling on `device` in `precision` (the world rank and host are recorded
/// with it).
pub fn measure(
    device: Device,
    precision: Precision,
    rank: u32,
    host: &str,
) -> Result<Ceiling, String> {
    let k = kind(precision)?;
    // bf16 forced native by the test switch on a processor that emulates it: a small
    // product, since the figure is the switch's, not the processor's.
    let forced = !device.is_cuda()
        && precision == Precision::Bf16
        && std::env::var(crate::train::native::FORCE_BF16).as_deref() == Ok("1");
    let n = if forced { 256 } else { gemm_n(device) };
    let a = Tensor::f_randn([n, n], (k, device)).map_err(|e| e.to_string())?;
    let b = Tensor::f_randn([n, n], (k, device)).map_err(|e| e.to_string())?;
    let gemm = best_rate(device, 2.0 * (n as f64).powi(3), || a.f_matmul(&b))?;
    let [batch, c, h, w] = conv_shape(device);
    let batch = if forced { 1 } else { batch };
    let x = MemoryFormat::ChannelsLast
        .apply(&Tensor::f_randn([batch, c, h, w], (k, device)).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let wt = MemoryFormat::ChannelsLast
        .apply(&Tensor::f_randn([c, c, 3, 3], (k, device)).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let conv_ops = 2.0 * 9.0 * (c * c * h * w * batch) as f64;
    let conv = best_rate(device, conv_ops, || {
        x.f_conv2d::<Tensor>(&wt, None, [1, 1], [1, 1], [1, 1], 1)
    })?;
    Ok(Ceiling {
        rank,
        host: host.into(),
        device: crate::host::device_label(device),
        precision: precision.name().into(),
        threads: u32::try_from(tch::get_num_threads()).unwrap_or(0),
        gemm_n: n as u32,
        gemm_ops_per_s: gemm,
        conv: format!("3×3 convolution {c}→{c} channels, {h}×{w}, batch {batch}, channels-last"),
        conv_ops_per_s: conv,
        reps: REPS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ceiling_is_a_positive_rate_in_the_precision_asked() {
        let c = measure(Device::Cpu, Precision::Fp32, 3, "h").unwrap();
        assert_eq!(
            (c.rank, c.precision.as_str(), c.gemm_n, c.reps),
            (3, "fp32", 2048, REPS)
        );
        assert!(c.gemm_ops_per_s > 0.0 && c.conv_ops_per_s > 0.0);
        assert!(measure(Device::Cpu, Precision::Auto, 0, "h").is_err());
    }
}
