//! The architecture IR: a DAG of layers with shape inference and validation, serialised as
//! JSON (people, records) and bincode (messages), the initial models (ResNet-50 v1 in the
//! AIPerf layout, CIFAR-style ResNets), and the search descriptor (main chain + skips).

mod descriptor;
mod resnet;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use descriptor::{ChainLayer, Descriptor, Skip, SkipKind};
pub use resnet::{by_name, cifar_resnet, resnet50, CifarResnetConfig};

/// A tensor's per-image shape: channels × height × width (a flat vector has h = w = 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    /// Channels (or features).
    pub c: u32,
    /// Height in pixels.
    pub h: u32,
    /// Width in pixels.
    pub w: u32,
}

impl Shape {
    /// A C×H×W shape.
    pub const fn new(c: u32, h: u32, w: u32) -> Self {
        Shape { c, h, w }
    }

    /// Elements per image, C·H·W.
    pub fn elements(&self) -> u64 {
        u64::from(self.c)
            .saturating_mul(u64::from(self.h))
            .saturating_mul(u64::from(self.w))
    }
}

impl std::str::FromStr for Shape {
    type Err = String;

    /// Parses `HxWxC` (height × width × channels, as image sizes are usually written).
    fn from_str(s: &str) -> Result<Self, String> {
        let dims: Vec<u32> = s
            .split('x')
            .map(|d| {
                let d = d.trim();
                d.parse::<u32>().map_err(|_| {
                    if !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) {
                        format!("input size {s:?}: {d} is too large (at most {})", u32::MAX)
                    } else {
                        format!("input size {s:?}: expected HxWxC, e.g. 224x224x3")
                    }
                })
            })
            .collect::<Result<_, _>>()?;
        match dims[..] {
            [h, w, c] if h > 0 && w > 0 && c > 0 => Ok(Shape::new(c, h, w)),
            _ => Err(format!(
                "input size {s:?}: expected HxWxC with three positive numbers, e.g. 224x224x3"
            )),
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{}", self.c, self.h, self.w)
    }
}

/// One layer. Input channel counts are not stored: shape inference derives them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
// Externally tagged (`{"conv2d": {...}}`, `"relu"`), so bincode can encode it too.
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// The network's input image; only the first node.
    Input {
        /// The input's shape.
        shape: Shape,
    },
    /// 2-D convolution without bias (a BatchNorm follows).
    Conv2d {
        /// Output channels.
        out_channels: u32,
        /// Square kernel side.
        kernel: u32,
        /// Stride.
        stride: u32,
        /// Zero padding on each side.
        padding: u32,
    },
    /// Batch normalisation over channels (affine).
    BatchNorm,
    /// Rectified linear unit.
    Relu,
    /// Max pooling (floor mode).
    MaxPool {
        /// Square window side.
        kernel: u32,
        /// Stride.
        stride: u32,
        /// Padding on each side.
        padding: u32,
    },
    /// Mean over height and width: C×H×W → C×1×1.
    GlobalAvgPool,
    /// Fully connected layer with bias, on a flat (C×1×1) input.
    Dense {
        /// Output features.
        out_features: u32,
    },
    /// Element-wise sum of inputs of equal shape.
    Add,
    /// Channel concatenation of inputs of equal height and width.
    Concat,
}

/// The kind of a layer, without its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerKind {
    /// [`Layer::Input`].
    Input,
    /// [`Layer::Conv2d`].
    Conv2d,
    /// [`Layer::BatchNorm`].
    BatchNorm,
    /// [`Layer::Relu`].
    Relu,
    /// [`Layer::MaxPool`].
    MaxPool,
    /// [`Layer::GlobalAvgPool`].
    GlobalAvgPool,
    /// [`Layer::Dense`].
    Dense,
    /// [`Layer::Add`].
    Add,
    /// [`Layer::Concat`].
    Concat,
}

impl LayerKind {
    /// Short lower-case name, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            LayerKind::Input => "input",
            LayerKind::Conv2d => "conv2d",
            LayerKind::BatchNorm => "batch_norm",
            LayerKind::Relu => "relu",
            LayerKind::MaxPool => "max_pool",
            LayerKind::GlobalAvgPool => "global_avg_pool",
            LayerKind::Dense => "dense",
            LayerKind::Add => "add",
            LayerKind::Concat => "concat",
        }
    }
}

impl Layer {
    /// The layer's kind.
    pub fn layer_kind(&self) -> LayerKind {
        match self {
            Layer::Input { .. } => LayerKind::Input,
            Layer::Conv2d { .. } => LayerKind::Conv2d,
            Layer::BatchNorm => LayerKind::BatchNorm,
            Layer::Relu => LayerKind::Relu,
            Layer::MaxPool { .. } => LayerKind::MaxPool,
            Layer::GlobalAvgPool => LayerKind::GlobalAvgPool,
            Layer::Dense { .. } => LayerKind::Dense,
            Layer::Add => LayerKind::Add,
            Layer::Concat => LayerKind::Concat,
        }
    }

    /// Short lower-case name of the layer's kind.
    pub fn kind(&self) -> &'static str {
        self.layer_kind().as_str()
    }
}

/// A layer and the nodes it reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Node {
    /// Unique name, used for parameter names (`stage2.block0.conv1`).
    pub name: String,
    /// The operation.
    pub layer: Layer,
    /// Indices of earlier nodes it reads; for `Add`/`Concat` the first is the main branch.
    pub inputs: Vec<usize>,
}

/// An architecture: nodes in topological order; node 0 is the input, the last node the
/// output (class logits).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Graph {
    /// The nodes, each reading only earlier ones.
    pub nodes: Vec<Node>,
}

/// Why a graph is malformed; names the node and the problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArchError {
    /// The graph has no nodes or does not start with its input.
    #[error("the graph must start with one Input node (found {0})")]
    NoInput(String),
    /// A node breaks a rule.
    #[error("node {index} ({name:?}, {kind}): {problem}")]
    Node {
        /// The node's index.
        index: usize,
        /// The node's name.
        name: String,
        /// The node's layer kind.
        kind: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// The JSON could not be read.
    #[error("architecture JSON: {0}")]
    Json(String),
}

/// The output shape of node `i`, a `layer` reading inputs of shapes `ins`, or what is wrong.
fn infer(i: usize, layer: &Layer, ins: &[Shape]) -> Result<Shape, String> {
    let arity = ins.len();
    Ok(match layer {
        Layer::Input { shape } => {
            if i != 0 || arity != 0 {
                return Err("only node 0 may be the input, and it reads nothing".into());
            }
            if shape.elements() == 0 {
                return Err(format!("input shape {shape} has a zero dimension"));
            }
            *shape
        }
        Layer::Add | Layer::Concat if arity < 2 => {
            return Err(format!("needs at least 2 inputs, has {arity}"))
        }
        Layer::Add => {
            if let Some(s) = ins.iter().find(|s| **s != ins[0]) {
                return Err(format!("inputs of different shapes: {} and {s}", ins[0]));
            }
            ins[0]
        }
        Layer::Concat => {
            if let Some(s) = ins.iter().find(|s| (s.h, s.w) != (ins[0].h, ins[0].w)) {
                return Err(format!(
                    "inputs of different resolution: {} and {s}",
                    ins[0]
                ));
            }
            Shape::new(ins.iter().map(|s| s.c).sum(), ins[0].h, ins[0].w)
        }
        _ if arity != 1 => return Err(format!("needs exactly 1 input, has {arity}")),
        Layer::Conv2d {
            out_channels,
            kernel,
            stride,
            padding,
        } => {
            let x = ins[0];
            if *out_channels == 0 {
                return Err("0 output channels".into());
            }
            windowed(x, *out_channels, [*kernel, *stride, *padding], "kernel")?
        }
        Layer::MaxPool {
            kernel,
            stride,
            padding,
        } => {
            let x = ins[0];
            if 2 * padding > *kernel {
                return Err(format!(
                    "padding {padding} exceeds half the window {kernel}"
                ));
            }
            windowed(x, x.c, [*kernel, *stride, *padding], "window")?
        }
        Layer::BatchNorm | Layer::Relu => ins[0],
        Layer::GlobalAvgPool => Shape::new(ins[0].c, 1, 1),
        Layer::Dense { out_features } => {
            if (ins[0].h, ins[0].w) != (1, 1) {
                return Err(format!(
                    "input {} is not flat: put a global_avg_pool before a dense layer",
                    ins[0]
                ));
            }
            if *out_features == 0 {
                return Err("0 output features".into());
            }
            Shape::new(*out_features, 1, 1)
        }
    })
}

/// The output of a sliding window `[kernel, stride, padding]` over `x` with `channels`
/// output channels, or why the window does not fit.
fn windowed(x: Shape, channels: u32, window: [u32; 3], what: &str) -> Result<Shape, String> {
    let [k, s, p] = window;
    match (window_out(x.h, k, s, p), window_out(x.w, k, s, p)) {
        (Some(h), Some(w)) => Ok(Shape::new(channels, h, w)),
        _ => Err(format!(
            "{what} {k}, stride {s}, padding {p} does not fit input {x}"
        )),
    }
}

/// The spatial output side of a window of `k`, stride `s`, padding `p` over `n` pixels.
fn window_out(n: u32, k: u32, s: u32, p: u32) -> Option<u32> {
    let padded = n.checked_add(p.checked_mul(2)?)?;
    if s == 0 || k == 0 || padded < k {
        return None;
    }
    Some((padded - k) / s + 1)
}

impl Graph {
    /// Appends a node reading `inputs`; returns its index.
    pub fn push(&mut self, name: impl Into<String>, layer: Layer, inputs: &[usize]) -> usize {
        self.nodes.push(Node {
            name: name.into(),
            layer,
            inputs: inputs.to_vec(),
        });
        self.nodes.len() - 1
    }

    /// The input shape (node 0). Panics on a graph without input; validate first.
    pub fn input_shape(&self) -> Shape {
        match self.nodes.first().map(|n| &n.layer) {
            Some(Layer::Input { shape }) => *shape,
            _ => panic!("graph without an Input node; call validate() first"),
        }
    }

    /// Index of the output node.
    pub fn output(&self) -> usize {
        self.nodes.len() - 1
    }

    /// Validates the graph and infers every node's output shape.
    pub fn shapes(&self) -> Result<Vec<Shape>, ArchError> {
        let first = self
            .nodes
            .first()
            .map(|n| n.layer.kind())
            .unwrap_or("no nodes");
        if !matches!(
            self.nodes.first().map(|n| &n.layer),
            Some(Layer::Input { .. })
        ) {
            return Err(ArchError::NoInput(first.into()));
        }
        let mut shapes: Vec<Shape> = Vec::with_capacity(self.nodes.len());
        let mut used = vec![false; self.nodes.len()];
        let mut names = std::collections::HashSet::with_capacity(self.nodes.len());
        for (i, node) in self.nodes.iter().enumerate() {
            let err = |problem: String| self.node_error(i, problem);
            if !names.insert(node.name.as_str()) {
                return Err(err("duplicate node name".into()));
            }
            if let Some(&bad) = node.inputs.iter().find(|&&j| j >= i) {
                return Err(err(format!(
                    "reads node {bad}, which does not come before it"
                )));
            }
            for &j in &node.inputs {
                used[j] = true;
            }
            let _arity = node.inputs.len();
            let ins: Vec<Shape> = node.inputs.iter().map(|&j| shapes[j]).collect();
            let shape = infer(i, &node.layer, &ins).map_err(err)?;
            shapes.push(shape);
        }
        let last = self.output();
        if let Some(i) = (0..last).find(|&i| !used[i]) {
            return Err(self.node_error(i, "its output is never used"));
        }
        let out = shapes[last];
        if (out.h, out.w) != (1, 1) || !matches!(self.nodes[last].layer, Layer::Dense { .. }) {
            return Err(self.node_error(
                last,
                "the output must be a dense layer producing class logits",
            ));
        }
        Ok(shapes)
    }

    /// The error for node `index`, naming it and its kind.
    fn node_error(&self, index: usize, problem: impl Into<String>) -> ArchError {
        let node = &self.nodes[index];
        ArchError::Node {
            index,
            name: node.name.clone(),
            kind: node.layer.kind(),
            problem: problem.into(),
        }
    }

    /// Validates without keeping the shapes.
    pub fn validate(&self) -> Result<(), ArchError> {
        self.shapes().map(|_| ())
    }

    /// Number of classes (output features). Validate first.
    pub fn num_classes(&self) -> u32 {
        match self.nodes.last().map(|n| &n.layer) {
            Some(Layer::Dense { out_features }) => *out_features,
            _ => 0,
        }
    }

    /// Pretty JSON, for people and records.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("graphs serialise")
    }

    /// Reads and validates JSON.
    pub fn from_json(text: &str) -> Result<Graph, ArchError> {
        let g: Graph = serde_json::from_str(text).map_err(|e| ArchError::Json(e.to_string()))?;
        g.validate()?;
        Ok(g)
    }

    /// Compact binary form for messages.
    pub fn to_bincode(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(self, bincode::config::standard()).expect("graphs serialise")
    }

    /// Reads and validates the binary form.
    pub fn from_bincode(bytes: &[u8]) -> Result<Graph, ArchError> {
        let (g, _): (Graph, usize) =
            bincode::serde::decode_from_slice(bytes, bincode::config::standard())
                .map_err(|e| ArchError::Json(format!("bincode: {e}")))?;
        g.validate()?;
        Ok(g)
    }
}

#[cfg(test)]
mod tests;
