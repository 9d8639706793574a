//! The start-up probe behind `--precision auto` and `--memory-format auto` (docs/design.md
//! §7): a few training steps of the run's first architecture at its first batch size, timed
//! in each candidate arithmetic (a precision and a memory format) on random data (the
//! arithmetic's speed does not depend on the values). The run sums the ranks' times and
//! trains in the fastest candidate.

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

/// One candidate's time in the start-up probe, as the run records it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeTime {
    /// The precision timed.
    pub precision: Precision,
    /// The memory format timed.
    pub memory_format: MemoryFormat,
    /// Median seconds per training step, summed over the training ranks.
    pub seconds_per_step: f64,
}

/// One candidate's model, optimiser and random batch, ready to step.
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

/// Seconds per step of `graph` at `batch` images in each of `candidates` (a precision and a
/// memory format): the medians of [`STEPS`] steps of each, taken one of each in turn so
/// that a neighbour's load or the machine's drift falls on all alike.
pub fn candidates(
    graph: &Graph,
    batch: u32,
    candidates: &[(Precision, MemoryFormat)],
    device: Device,
) -> Result<Vec<f64>, TrainError> {
    let mut ready = candidates
        .iter()
        .map(|&c| Setup::new(graph, i64::from(batch), c, device))
        .collect::<Result<Vec<_>, _>>()?;
    let mut times = vec![Vec::with_capacity(STEPS); ready.len()];
    for i in 0..WARM + STEPS {
        for (s, t) in ready.iter_mut().zip(times.iter_mut()) {
            let secs = s.step()?;
            if i >= WARM {
                t.push(secs);
            }
        }
    }
    Ok(times.into_iter().map(crate::stats::median).collect())
}

/// The index of the fastest candidate given the summed seconds per step of each (the
/// earlier one on a tie; `None` for none or a time that is not a positive number).
pub fn fastest(seconds: &[f64]) -> Option<usize> {
    if seconds.is_empty() || seconds.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
        return None;
    }
    let mut best = 0;
    for (i, s) in seconds.iter().enumerate() {
        if *s < seconds[best] {
            best = i;
        }
    }
    Some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_times_every_candidate_and_picks_the_fastest() {
        let g = crate::arch::by_name("resnet8", crate::arch::Shape::new(1, 12, 12), 10).unwrap();
        let c = [
            (Precision::Fp32, MemoryFormat::Nchw),
            (Precision::Fp32, MemoryFormat::ChannelsLast),
        ];
        let s = candidates(&g, 4, &c, Device::Cpu).unwrap();
        assert_eq!(s.len(), 2);
        assert!(s.iter().all(|t| t.is_finite() && *t > 0.0), "{s:?}");
        assert_eq!(fastest(&[2.0, 1.0, 3.0]), Some(1));
        assert_eq!(fastest(&[1.0, 2.0]), Some(0));
        assert_eq!(fastest(&[1.0, 1.0]), Some(0));
        assert_eq!(fastest(&[]), None);
        assert_eq!(fastest(&[1.0, f64::NAN]), None);
    }
}
