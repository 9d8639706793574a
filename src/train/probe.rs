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

/// Timed steps of each format, alternating one step of each (after [`WARM`] untimed).
pub const STEPS: usize = 9;
/// Untimed steps of each format first (oneDNN builds its kernels on the first).
pub const WARM: usize = 2;

/// One format's model, optimiser and random batch, ready to step.
struct Setup {
    _vs: nn::VarStore,
    net: Net,
    opt: nn::Optimizer,
    x: Tensor,
    y: Tensor,
    precision: Precision,
    device: Device,
}

impl Setup {
    fn new(
        graph: &Graph,
        batch: i64,
        (precision, format): (Precision, MemoryFormat),
        device: Device,
    ) -> Result<Self, TrainError> {
        let vs = nn::VarStore::new(device);
        let net = Net::build(&vs.root(), graph)?;
        format.apply_to(&vs)?;
        let opt = nn::Sgd {
            momentum: 0.9,
            ..Default::default()
        }
        .build(&vs, 1e-3)?;
        let s = graph.input_shape();
        let (c, h, w) = (i64::from(s.c), i64::from(s.h), i64::from(s.w));
        let x = format.apply(&Tensor::f_randn([batch, c, h, w], (Kind::Float, device))?)?;
        let classes = i64::from(graph.num_classes());
        let y = Tensor::f_randint(classes, [batch], (Kind::Int64, device))?;
        Ok(Setup {
            _vs: vs,
            net,
            opt,
            x,
            y,
            precision,
            device,
        })
    }

    /// Seconds of one training step.
    fn step(&mut self) -> Result<f64, TrainError> {
        let t = Instant::now();
        self.opt.zero_grad();
        let loss = self
            .precision
            .autocast(self.device, || self.net.forward_t(&self.x, true))
            .f_to_kind(Kind::Float)?
            .f_cross_entropy_loss::<Tensor>(&self.y, None, Reduction::Mean, -100, 0.1)?;
        loss.f_backward()?;
        self.opt.step();
        super::synchronize(self.device);
        Ok(t.elapsed().as_secs_f64())
    }
}

/// Seconds per step of `graph` at `batch` images in NCHW and in channels-last: the medians
/// of [`STEPS`] steps of each, taken one of each in turn so that a neighbour's load or the
/// machine's drift falls on both alike.
pub fn formats(
    graph: &Graph,
    batch: u32,
    precision: Precision,
    device: Device,
) -> Result<[f64; 2], TrainError> {
    let setup = |f| Setup::new(graph, i64::from(batch), (precision, f), device);
    let mut ready = [
        setup(MemoryFormat::Nchw)?,
        setup(MemoryFormat::ChannelsLast)?,
    ];
    let mut times = [Vec::with_capacity(STEPS), Vec::with_capacity(STEPS)];
    for i in 0..WARM + STEPS {
        for (s, t) in ready.iter_mut().zip(times.iter_mut()) {
            let secs = s.step()?;
            if i >= WARM {
                t.push(secs);
            }
        }
    }
    Ok(times.map(crate::stats::median))
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
