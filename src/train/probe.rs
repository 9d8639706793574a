//! The start-up probe behind `--memory-format auto` (docs/design.md §7): a few training
//! steps of the run's first architecture at its first batch size, in the run's precision,
//! timed in each memory format on random data (the arithmetic's speed does not depend on
//! the values). The run sums the ranks' times and trains in the faster format.

use std::time::Instant;

use tch::nn::{ModuleT, OptimizerConfig};
use tch::{nn, Device, Kind, Reduction, Tensor};

use super::{MemoryFormat, Precision, TrainError};
use crate::arch::Graph;
use crate::model::Net;

/// Timed steps per repetition (after one untimed).
pub const STEPS: usize = 3;
/// Repetitions of each format, alternating.
pub const REPS: usize = 2;

/// Seconds per training step of `graph` at `batch` images in `format` (the best of
/// [`REPS`] runs of [`STEPS`] steps).
fn step_seconds(
    graph: &Graph,
    batch: i64,
    (precision, format): (Precision, MemoryFormat),
    device: Device,
) -> Result<f64, TrainError> {
    let vs = nn::VarStore::new(device);
    let net = Net::build(&vs.root(), graph)?;
    format.apply_to(&vs)?;
    let mut opt = nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(&vs, 1e-3)?;
    let s = graph.input_shape();
    let (c, h, w) = (i64::from(s.c), i64::from(s.h), i64::from(s.w));
    let x = format.apply(&Tensor::f_randn([batch, c, h, w], (Kind::Float, device))?)?;
    let classes = i64::from(graph.num_classes());
    let y = Tensor::f_randint(classes, [batch], (Kind::Int64, device))?;
    let mut step = || -> Result<(), TrainError> {
        opt.zero_grad();
        let loss = precision
            .autocast(device, || net.forward_t(&x, true))
            .f_to_kind(Kind::Float)?
            .f_cross_entropy_loss::<Tensor>(&y, None, Reduction::Mean, -100, 0.1)?;
        loss.f_backward()?;
        opt.step();
        super::gradients::synchronize(device);
        Ok(())
    };
    step()?;
    let t = Instant::now();
    for _ in 0..STEPS {
        step()?;
    }
    Ok(t.elapsed().as_secs_f64() / STEPS as f64)
}

/// Seconds per step in NCHW and in channels-last, each the best of [`REPS`] alternating
/// repetitions.
pub fn formats(
    graph: &Graph,
    batch: u32,
    precision: Precision,
    device: Device,
) -> Result<[f64; 2], TrainError> {
    let mut best = [f64::INFINITY; 2];
    for _ in 0..REPS {
        for (i, f) in [MemoryFormat::Nchw, MemoryFormat::ChannelsLast]
            .into_iter()
            .enumerate()
        {
            let s = step_seconds(graph, i64::from(batch), (precision, f), device)?;
            best[i] = best[i].min(s);
        }
    }
    Ok(best)
}

/// The faster format given the summed seconds per step of each (NCHW on a tie).
pub fn faster(seconds: [f64; 2]) -> MemoryFormat {
    if seconds[1] < seconds[0] {
        MemoryFormat::ChannelsLast
    } else {
        MemoryFormat::Nchw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_times_both_formats_and_picks_the_faster() {
        let g = crate::arch::by_name("resnet8", crate::arch::Shape::new(1, 12, 12), 10).unwrap();
        let s = formats(&g, 4, Precision::Fp32, Device::Cpu).unwrap();
        assert!(s.iter().all(|t| t.is_finite() && *t > 0.0), "{s:?}");
        assert_eq!(faster([2.0, 1.0]), MemoryFormat::ChannelsLast);
        assert_eq!(faster([1.0, 2.0]), MemoryFormat::Nchw);
        assert_eq!(faster([1.0, 1.0]), MemoryFormat::Nchw);
    }
}
