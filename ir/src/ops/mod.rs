//! Analytical operation counting, docs/design.md §4 (a contract): per-layer forward (FP) and
//! backward (BP) operations per image and trainable parameters, from the IR and the input
//! resolution alone; per-step parameter-update operations; training and validation epoch
//! totals in u128.
//!
//! | layer | FP per image | BP per image |
//! |---|---|---|
//! | Conv k×k, Ci→Co, output H×W | 2·k²·Ci·Co·H·W | 2·FP; a conv reading the network input: FP |
//! | Dense Ci→Co | 2·Ci·Co | 2·FP |
//! | BatchNorm C×H×W | 7·C·H·W | 0 |
//! | ReLU | C·H·W | 0 |
//! | Add of n inputs | (n−1)·C·H·W (the table's C·H·W for two) | 0 |
//! | MaxPool k, stride s, input C×H×W | ⌊C·H·W·k²/s²⌋ | 0 |
//! | GlobalAvgPool, input C×H×W | (H·W−1)·C + 4·C | 0 |
//! | Softmax over n classes (once, at the output) | 8n + (n−1) + 4n | 0 |
//! | Concat, Input | 0 (data movement) | 0 |
//!
//! Parameter update (SGD): 2 operations per trainable parameter per optimizer step. The
//! AIPerf reference profiler's ResNet-50 figure, 7,806,583,495 FP per 224×224 image, is
//! reproduced exactly (a test checks it); its MaxPool term uses the pool's input size.

mod table;

pub use table::group_digits;

use serde::Serialize;

use crate::arch::{ArchError, Graph, Layer, Shape};

/// One layer's counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LayerOps {
    /// Node index in the graph.
    pub index: usize,
    /// Node name.
    pub name: String,
    /// Layer kind.
    pub kind: &'static str,
    /// Output shape per image.
    pub output: Shape,
    /// Trainable parameters.
    pub params: u64,
    /// Forward operations per image.
    pub fp: u64,
    /// Backward operations per image.
    pub bp: u64,
}

/// The counts of a whole architecture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OpCount {
    /// Per layer, in graph order.
    pub layers: Vec<LayerOps>,
    /// The output softmax's forward operations per image.
    pub softmax_fp: u64,
    /// Forward operations per image (layers + softmax).
    pub fp_per_image: u64,
    /// Backward operations per image.
    pub bp_per_image: u64,
    /// Trainable parameters.
    pub params: u64,
}

impl OpCount {
    /// Counts `graph` (validated here). Every product is checked: a count that does not
    /// fit u64 per image is an error naming the layer, never a wrapped number.
    pub fn of(graph: &Graph) -> Result<OpCount, ArchError> {
        let shapes = graph.shapes()?;
        let mut layers = Vec::with_capacity(graph.nodes.len());
        let mut trains_upstream: Vec<bool> = Vec::with_capacity(graph.nodes.len());
        for (i, node) in graph.nodes.iter().enumerate() {
            let out = shapes[i];
            let input = node.inputs.first().map(|&j| shapes[j]);
            let too_large = || ArchError::Node {
                index: i,
                name: node.name.clone(),
                kind: node.layer.kind(),
                problem: "its operation count per image exceeds 2^64: the input is too large"
                    .into(),
            };
            let (fp, params) =
                layer_counts(&node.layer, node.inputs.len(), input, out).ok_or_else(too_large)?;
            // A layer with parameters reading (through any path) the output of another needs
            // its input gradient; one with no trainable layer between it and the input
            // does not (docs/design.md §4: "first conv of the network: FP only").
            let upstream = node.inputs.iter().any(|&j| trains_upstream[j]);
            trains_upstream.push(upstream || has_params(&node.layer));
            let bp = match node.layer {
                Layer::Conv2d { .. } if !upstream => Some(fp),
                Layer::Conv2d { .. } | Layer::Dense { .. } => fp.checked_mul(2),
                _ => Some(0),
            }
            .ok_or_else(too_large)?;
            layers.push(LayerOps {
                index: i,
                name: node.name.clone(),
                kind: node.layer.kind(),
                output: out,
                params,
                fp,
                bp,
            });
        }
        let n = u64::from(graph.num_classes());
        let softmax_fp = 8 * n + (n - 1) + 4 * n;
        let total = |f: fn(&LayerOps) -> u64, plus: u64| {
            layers.iter().try_fold(plus, |acc, l| acc.checked_add(f(l)))
        };
        let overflow = || {
            ArchError::Json(
                "the architecture's total operation count per image exceeds 2^64".into(),
            )
        };
        Ok(OpCount {
            softmax_fp,
            fp_per_image: total(|l| l.fp, softmax_fp).ok_or_else(overflow)?,
            bp_per_image: total(|l| l.bp, 0).ok_or_else(overflow)?,
            params: total(|l| l.params, 0).ok_or_else(overflow)?,
            layers,
        })
        .and_then(|c: OpCount| {
            c.fp_per_image
                .checked_add(c.bp_per_image)
                .and(c.params.checked_mul(2))
                .map(|_| c)
                .ok_or_else(overflow)
        })
    }

    /// Training operations per image, FP + BP (the update is per step).
    pub fn train_per_image(&self) -> u64 {
        self.fp_per_image + self.bp_per_image
    }

    /// Operations of one SGD parameter update (one optimizer step).
    pub fn update_per_step(&self) -> u64 {
        2 * self.params
    }

    /// Training operations of an epoch: images·(FP + BP) + steps·update.
    pub fn train_epoch(&self, images: u64, steps: u64) -> u128 {
        u128::from(images) * u128::from(self.train_per_image())
            + u128::from(steps) * u128::from(self.update_per_step())
    }

    /// Validation operations: images·FP.
    pub fn eval_epoch(&self, images: u64) -> u128 {
        u128::from(images) * u128::from(self.fp_per_image)
    }
}

/// Whether a layer has trainable parameters.
fn has_params(layer: &Layer) -> bool {
    matches!(
        layer,
        Layer::Conv2d { .. } | Layer::Dense { .. } | Layer::BatchNorm
    )
}

/// The product of the factors, if it fits u64.
fn product(factors: &[u64]) -> Option<u64> {
    factors.iter().try_fold(1u64, |acc, &f| acc.checked_mul(f))
}

/// Forward operations per image and trainable parameters of one layer (docs/design.md §4), or
/// `None` when a count does not fit u64.
fn layer_counts(
    layer: &Layer,
    inputs: usize,
    input: Option<Shape>,
    out: Shape,
) -> Option<(u64, u64)> {
    let elements = |s: Shape| product(&[u64::from(s.c), u64::from(s.h), u64::from(s.w)]);
    let u = u64::from;
    Some(match (layer, input) {
        (
            Layer::Conv2d {
                out_channels,
                kernel,
                ..
            },
            Some(x),
        ) => {
            let w = product(&[u(*kernel), u(*kernel), u(x.c), u(*out_channels)])?;
            (product(&[2, w, u(out.h), u(out.w)])?, w)
        }
        (Layer::Dense { out_features }, Some(x)) => {
            let w = product(&[elements(x)?, u(*out_features)])?;
            (w.checked_mul(2)?, w.checked_add(u(*out_features))?)
        }
        (Layer::BatchNorm, _) => (elements(out)?.checked_mul(7)?, 2 * u(out.c)),
        (Layer::Relu, _) => (elements(out)?, 0),
        (Layer::Add, _) => (
            (inputs as u64)
                .saturating_sub(1)
                .checked_mul(elements(out)?)?,
            0,
        ),
        (Layer::MaxPool { kernel, stride, .. }, Some(x)) => {
            let k2 = u128::from(*kernel) * u128::from(*kernel);
            let s2 = (u128::from(*stride) * u128::from(*stride)).max(1);
            (u64::try_from(u128::from(elements(x)?) * k2 / s2).ok()?, 0)
        }
        (Layer::GlobalAvgPool, Some(x)) => {
            let hw = product(&[u(x.h), u(x.w)])?;
            let fp = (hw - 1)
                .checked_mul(u(x.c))?
                .checked_add(u(x.c).checked_mul(4)?)?;
            (fp, 0)
        }
        _ => (0, 0),
    })
}

#[cfg(test)]
mod tests;
