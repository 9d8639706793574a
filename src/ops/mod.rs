//! Analytical operation counting, DESIGN.md §4 (a contract): per-layer forward (FP) and
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
    /// Counts `graph` (validated here).
    pub fn of(graph: &Graph) -> Result<OpCount, ArchError> {
        let shapes = graph.shapes()?;
        let mut layers = Vec::with_capacity(graph.nodes.len());
        for (i, node) in graph.nodes.iter().enumerate() {
            let out = shapes[i];
            let input = node.inputs.first().map(|&j| shapes[j]);
            let (fp, params) = match (&node.layer, input) {
                (
                    Layer::Conv2d {
                        out_channels,
                        kernel,
                        ..
                    },
                    Some(x),
                ) => {
                    let k2 = u64::from(*kernel) * u64::from(*kernel);
                    let w = k2 * u64::from(x.c) * u64::from(*out_channels);
                    (2 * w * u64::from(out.h) * u64::from(out.w), w)
                }
                (Layer::Dense { out_features }, Some(x)) => {
                    let w = x.elements() * u64::from(*out_features);
                    (2 * w, w + u64::from(*out_features))
                }
                (Layer::BatchNorm, _) => (7 * out.elements(), 2 * u64::from(out.c)),
                (Layer::Relu, _) => (out.elements(), 0),
                (Layer::Add, _) => ((node.inputs.len() as u64 - 1) * out.elements(), 0),
                (Layer::MaxPool { kernel, stride, .. }, Some(x)) => {
                    let k2 = u64::from(*kernel) * u64::from(*kernel);
                    let s2 = u64::from(*stride) * u64::from(*stride);
                    (x.elements() * k2 / s2, 0)
                }
                (Layer::GlobalAvgPool, Some(x)) => {
                    let hw = u64::from(x.h) * u64::from(x.w);
                    ((hw - 1) * u64::from(x.c) + 4 * u64::from(x.c), 0)
                }
                _ => (0, 0),
            };
            let bp = match node.layer {
                Layer::Conv2d { .. } if node.inputs == [0] => fp,
                Layer::Conv2d { .. } | Layer::Dense { .. } => 2 * fp,
                _ => 0,
            };
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
        Ok(OpCount {
            softmax_fp,
            fp_per_image: layers.iter().map(|l| l.fp).sum::<u64>() + softmax_fp,
            bp_per_image: layers.iter().map(|l| l.bp).sum(),
            params: layers.iter().map(|l| l.params).sum(),
            layers,
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

#[cfg(test)]
mod tests;
