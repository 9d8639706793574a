//! The search descriptor of an architecture (Auto-Keras/NNI style): the layers of the main
//! chain in order, and the skip connections as (branch point, merge point, kind) positions
//! on that chain. The edit distance of the Bayesian search compares descriptors.

use serde::{Deserialize, Serialize};

use super::{Graph, Layer, LayerKind};

/// A main-chain layer as the distance sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChainLayer {
    /// The layer kind.
    pub kind: LayerKind,
    /// Output channels of a convolution or features of a dense layer; 0 otherwise.
    pub width: u32,
    /// Kernel side of a convolution or pooling window; 0 otherwise.
    pub kernel: u32,
    /// Stride of a convolution or pooling window; 0 otherwise.
    pub stride: u32,
    /// Padding of a convolution or pooling window; 0 otherwise.
    pub padding: u32,
}

/// How a skip connection merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SkipKind {
    /// Element-wise sum (ResNet).
    Add,
    /// Channel concatenation (DenseNet).
    Concat,
}

/// A skip connection between two main-chain positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Skip {
    /// Main-chain position where the branch leaves.
    pub from: usize,
    /// Main-chain position of the merge node.
    pub to: usize,
    /// How it merges.
    pub kind: SkipKind,
}

/// Main chain + skip connections.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Descriptor {
    /// Main-chain layers from the input (excluded) to the output.
    pub layers: Vec<ChainLayer>,
    /// Skip connections, ordered by (to, from).
    pub skips: Vec<Skip>,
}

impl Graph {
    /// The main chain: from the output back to the input along every node's first input.
    pub fn main_chain(&self) -> Vec<usize> {
        let mut chain = vec![self.output()];
        let mut at = self.output();
        while let Some(&prev) = self.nodes[at].inputs.first() {
            chain.push(prev);
            at = prev;
        }
        chain.reverse();
        chain
    }

    /// The search descriptor. The graph should be valid.
    pub fn descriptor(&self) -> Descriptor {
        let chain = self.main_chain();
        let mut position = vec![usize::MAX; self.nodes.len()];
        for (p, &n) in chain.iter().enumerate() {
            position[n] = p;
        }
        let layers = chain[1..]
            .iter()
            .map(|&n| {
                let (width, kernel, stride, padding) = match self.nodes[n].layer {
                    Layer::Conv2d {
                        out_channels,
                        kernel,
                        stride,
                        padding,
                    } => (out_channels, kernel, stride, padding),
                    Layer::Dense { out_features } => (out_features, 0, 0, 0),
                    Layer::MaxPool {
                        kernel,
                        stride,
                        padding,
                    } => (0, kernel, stride, padding),
                    _ => (0, 0, 0, 0),
                };
                ChainLayer {
                    kind: self.nodes[n].layer.layer_kind(),
                    width,
                    kernel,
                    stride,
                    padding,
                }
            })
            .collect();
        let mut skips = Vec::new();
        for &n in &chain {
            let kind = match self.nodes[n].layer {
                Layer::Add => SkipKind::Add,
                Layer::Concat => SkipKind::Concat,
                _ => continue,
            };
            for &branch in &self.nodes[n].inputs[1..] {
                // Follow the branch back to where it leaves the main chain.
                let mut at = branch;
                while position[at] == usize::MAX {
                    at = self.nodes[at].inputs[0];
                }
                skips.push(Skip {
                    from: position[at],
                    to: position[n],
                    kind,
                });
            }
        }
        skips.sort_by_key(|s| (s.to, s.from));
        Descriptor { layers, skips }
    }
}
