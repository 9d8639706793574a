//! Builds a libtorch module from the architecture IR: one VarStore per model, parameter
//! names following the node names (`stage2.block0.1.conv.weight`), `ModuleT` with the train
//! flag (batch-norm statistics), on whatever device the VarStore lives.

use tch::nn::{self, ModuleT};
use tch::Tensor;

use crate::arch::{ArchError, Graph, Layer, Shape};

/// Why a model could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The architecture is malformed.
    #[error(transparent)]
    Arch(#[from] ArchError),
    /// libtorch refused an operation.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    /// A dimension does not fit libtorch's i64.
    #[error("node {0}: a dimension does not fit in i64")]
    Overflow(String),
}

/// The runtime form of one node.
#[derive(Debug)]
enum Op {
    Input,
    Conv(nn::Conv2D),
    BatchNorm(nn::BatchNorm),
    Relu,
    MaxPool {
        kernel: i64,
        stride: i64,
        padding: i64,
    },
    GlobalAvgPool,
    Dense(nn::Linear),
    Add,
    Concat,
}

/// A network built from a [`Graph`]; its parameters live in the VarStore it was built in.
#[derive(Debug)]
pub struct Net {
    ops: Vec<Op>,
    inputs: Vec<Vec<usize>>,
    /// For each node, the last node that reads it (its output can be freed after that).
    last_use: Vec<usize>,
    shapes: Vec<Shape>,
}

fn dim(v: u32) -> i64 {
    i64::from(v)
}

/// The VarStore path of a node: its name split at dots.
fn node_path<'a>(root: &nn::Path<'a>, name: &str) -> nn::Path<'a> {
    let mut parts = name.split('.');
    let first = root / parts.next().unwrap_or(name);
    parts.fold(first, |p, part| p / part)
}

impl Net {
    /// Validates `graph` and creates its parameters under `root`.
    pub fn build(root: &nn::Path, graph: &Graph) -> Result<Net, ModelError> {
        let shapes = graph.shapes()?;
        let mut ops = Vec::with_capacity(graph.nodes.len());
        for node in &graph.nodes {
            let x = node.inputs.first().map(|&j| shapes[j]);
            let p = node_path(root, &node.name);
            let op = match (&node.layer, x) {
                (Layer::Input { .. }, _) => Op::Input,
                (
                    Layer::Conv2d {
                        out_channels,
                        kernel,
                        stride,
                        padding,
                    },
                    Some(x),
                ) => {
                    let cfg = nn::ConvConfig {
                        stride: dim(*stride),
                        padding: dim(*padding),
                        bias: false,
                        ..Default::default()
                    };
                    Op::Conv(nn::conv2d(
                        p,
                        dim(x.c),
                        dim(*out_channels),
                        dim(*kernel),
                        cfg,
                    ))
                }
                (Layer::BatchNorm, Some(x)) => {
                    Op::BatchNorm(nn::batch_norm2d(p, dim(x.c), Default::default()))
                }
                (Layer::Relu, _) => Op::Relu,
                (
                    Layer::MaxPool {
                        kernel,
                        stride,
                        padding,
                    },
                    _,
                ) => Op::MaxPool {
                    kernel: dim(*kernel),
                    stride: dim(*stride),
                    padding: dim(*padding),
                },
                (Layer::GlobalAvgPool, _) => Op::GlobalAvgPool,
                (Layer::Dense { out_features }, Some(x)) => {
                    let features = i64::try_from(x.elements())
                        .map_err(|_| ModelError::Overflow(node.name.clone()))?;
                    Op::Dense(nn::linear(
                        p,
                        features,
                        dim(*out_features),
                        Default::default(),
                    ))
                }
                (Layer::Add, _) => Op::Add,
                (Layer::Concat, _) => Op::Concat,
                (layer, None) => unreachable!("validated graph: {} without input", layer.kind()),
            };
            ops.push(op);
        }
        let mut last_use: Vec<usize> = (0..graph.nodes.len()).collect();
        for (i, node) in graph.nodes.iter().enumerate() {
            for &j in &node.inputs {
                last_use[j] = last_use[j].max(i);
            }
        }
        Ok(Net {
            ops,
            inputs: graph.nodes.iter().map(|n| n.inputs.clone()).collect(),
            last_use,
            shapes,
        })
    }

    /// The IR's inferred shape of every node.
    pub fn shapes(&self) -> &[Shape] {
        &self.shapes
    }

    /// Runs the network; with `keep_all`, returns every node's output (for inspection),
    /// otherwise only the last, freeing intermediates as soon as their last reader ran.
    pub fn forward_nodes(&self, xs: &Tensor, train: bool, keep_all: bool) -> Vec<Tensor> {
        let mut outs: Vec<Option<Tensor>> = Vec::with_capacity(self.ops.len());
        for (i, op) in self.ops.iter().enumerate() {
            let arg = |k: usize| outs[self.inputs[i][k]].as_ref().expect("input still alive");
            let y = match op {
                Op::Input => xs.shallow_clone(),
                Op::Conv(c) => arg(0).apply(c),
                Op::BatchNorm(b) => arg(0).apply_t(b, train),
                Op::Relu => arg(0).relu(),
                Op::MaxPool {
                    kernel,
                    stride,
                    padding,
                } => arg(0).max_pool2d(
                    [*kernel, *kernel],
                    [*stride, *stride],
                    [*padding, *padding],
                    [1, 1],
                    false,
                ),
                Op::GlobalAvgPool => arg(0).adaptive_avg_pool2d([1, 1]),
                Op::Dense(l) => arg(0).flatten(1, -1).apply(l),
                Op::Add => {
                    (1..self.inputs[i].len()).fold(arg(0).shallow_clone(), |acc, k| acc + arg(k))
                }
                Op::Concat => {
                    let parts: Vec<&Tensor> = (0..self.inputs[i].len()).map(arg).collect();
                    Tensor::cat(&parts, 1)
                }
            };
            outs.push(Some(y));
            if !keep_all {
                for &j in &self.inputs[i] {
                    if self.last_use[j] == i {
                        outs[j] = None;
                    }
                }
            }
        }
        if keep_all {
            outs.into_iter().map(|o| o.expect("kept")).collect()
        } else {
            vec![outs.pop().flatten().expect("output")]
        }
    }
}

impl ModuleT for Net {
    /// Class logits, N × classes.
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.forward_nodes(xs, train, false).pop().expect("output")
    }
}

#[cfg(test)]
mod tests;
