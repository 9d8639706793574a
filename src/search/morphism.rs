//! Network morphisms (AIPerf's block variant of NNI/Auto-Keras): each neighbour differs from
//! its parent by one operation on the main chain —
//! - deeper: after a ReLU before global pooling, insert Conv(C→C, k×k) → BN → ReLU, with k
//!   the trial's kernel size;
//! - wider: double a convolution's (or hidden dense layer's) outputs; the IR infers input
//!   channels, so the BN layers and the next conv/dense it feeds follow;
//! - skip: add a ResNet-style shortcut from a ReLU to a later BN output (through a 1×1
//!   conv + BN projection when channels or resolution differ).
//!
//! Results are validated and must stay within [`Limits`].

use rand::seq::IndexedRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::arch::{Graph, Layer, Node, Shape};
use crate::ops::OpCount;

/// One morphism, addressed by node names (stable across the renumbering insertions cause).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Morphism {
    /// Insert conv(k×k) → BN → ReLU after the named ReLU.
    Deeper {
        /// The ReLU after which the block goes.
        after: String,
        /// Kernel side (3, 5 or 7).
        kernel: u32,
    },
    /// Double the outputs of the named conv or dense layer.
    Wider {
        /// The layer to widen.
        layer: String,
    },
    /// Add the named ReLU's output to the named (later) BN's output.
    Skip {
        /// Where the shortcut starts (a ReLU).
        from: String,
        /// The batch norm whose output receives it.
        to: String,
    },
}

/// Bounds on what the search may grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Most nodes (layers) in a graph.
    pub max_layers: usize,
    /// Most trainable parameters.
    pub max_params: u64,
    /// Most channels of any convolution.
    pub max_width: u32,
}

impl Default for Limits {
    /// 500 nodes, 2^26 parameters, 4096 channels. NNI caps its main chain at 100 layers and
    /// models at 2^24 parameters, but the official start, ResNet-50 (175 nodes, 25.6 M
    /// parameters), is already past both; these leave it room for a few dozen morphisms.
    fn default() -> Self {
        Limits {
            max_layers: 500,
            max_params: 1 << 26,
            max_width: 4096,
        }
    }
}

/// Why a morphism cannot be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MorphError {
    /// A named node is missing or of the wrong kind or place.
    #[error("{0}")]
    Target(String),
    /// The result breaks the graph rules (e.g. an Add with mismatched channels).
    #[error("result is not a valid architecture: {0}")]
    Invalid(#[from] crate::arch::ArchError),
    /// The result exceeds the limits.
    #[error("result exceeds the limits: {0}")]
    Limit(String),
}

fn index_of(g: &Graph, name: &str) -> Result<usize, MorphError> {
    g.nodes
        .iter()
        .position(|n| n.name == name)
        .ok_or_else(|| MorphError::Target(format!("no node named {name:?}")))
}

/// A name prefix `{stem}{n}` not used by any node yet.
fn fresh(g: &Graph, stem: &str) -> String {
    (0..)
        .map(|n| format!("{stem}{n}"))
        .find(|p| {
            !g.nodes
                .iter()
                .any(|node| node.name.starts_with(&format!("{p}.")))
        })
        .expect("some prefix is free")
}

/// Inserts `new` (whose inputs are already final indices, or `usize::MAX` for "the node at
/// `at`") right after node `at`, and makes every old reader of `at` read the last new node.
fn insert_after(g: &Graph, at: usize, new: Vec<(String, Layer, Vec<usize>)>) -> Graph {
    let k = new.len();
    let shift = |j: usize| if j > at { j + k } else { j };
    let mut nodes = Vec::with_capacity(g.nodes.len() + k);
    for (i, n) in g.nodes.iter().enumerate() {
        let inputs = n
            .inputs
            .iter()
            .map(|&j| if j == at { at + k } else { shift(j) })
            .collect();
        nodes.push(Node {
            name: n.name.clone(),
            layer: n.layer.clone(),
            inputs,
        });
        if i == at {
            for (name, layer, inputs) in &new {
                nodes.push(Node {
                    name: name.clone(),
                    layer: layer.clone(),
                    inputs: inputs.clone(),
                });
            }
        }
    }
    Graph { nodes }
}

/// Position of the first global pooling on the main chain (morphisms stay before it).
fn chain_before_pool(g: &Graph) -> Vec<usize> {
    g.main_chain()
        .into_iter()
        .take_while(|&n| !matches!(g.nodes[n].layer, Layer::GlobalAvgPool))
        .collect()
}

impl Morphism {
    /// Applies the morphism; the result is validated and checked against `limits`.
    pub fn apply(&self, g: &Graph, limits: &Limits) -> Result<Graph, MorphError> {
        let shapes = g.shapes()?;
        let out = match self {
            Morphism::Deeper { after, kernel } => deeper(g, &shapes, after, *kernel)?,
            Morphism::Wider { layer } => wider(g, layer)?,
            Morphism::Skip { from, to } => skip(g, &shapes, from, to)?,
        };
        check_limits(&out, limits)?;
        Ok(out)
    }
}

/// Conv(C→C, k×k) → BN → ReLU after the main-chain ReLU `after`.
fn deeper(g: &Graph, shapes: &[Shape], after: &str, kernel: u32) -> Result<Graph, MorphError> {
    let at = index_of(g, after)?;
    if !matches!(g.nodes[at].layer, Layer::Relu) || !chain_before_pool(g).contains(&at) {
        return Err(MorphError::Target(format!(
            "{after:?} is not a ReLU on the main chain before pooling"
        )));
    }
    if kernel.is_multiple_of(2) {
        return Err(MorphError::Target(format!(
            "kernel {kernel} must be odd to keep the resolution"
        )));
    }
    let p = fresh(g, "deeper");
    let conv = Layer::Conv2d {
        out_channels: shapes[at].c,
        kernel,
        stride: 1,
        padding: kernel / 2,
    };
    Ok(insert_after(
        g,
        at,
        vec![
            (format!("{p}.conv"), conv, vec![at]),
            (format!("{p}.bn"), Layer::BatchNorm, vec![at + 1]),
            (format!("{p}.relu"), Layer::Relu, vec![at + 2]),
        ],
    ))
}

/// Doubles the filters of conv or hidden dense layer `layer` (shape inference carries the
/// new channel count to the layers it feeds).
fn wider(g: &Graph, layer: &str) -> Result<Graph, MorphError> {
    let at = index_of(g, layer)?;
    let mut w = g.clone();
    match &mut w.nodes[at].layer {
        Layer::Conv2d { out_channels, .. } => *out_channels = out_channels.saturating_mul(2),
        Layer::Dense { out_features } if at != g.output() => {
            *out_features = out_features.saturating_mul(2)
        }
        _ => {
            return Err(MorphError::Target(format!(
                "{layer:?} is not a conv or hidden dense layer"
            )))
        }
    }
    Ok(w)
}

/// A shortcut from main-chain ReLU `from` to the output of main-chain BN `to` (with a 1×1
/// projection when the shapes differ).
fn skip(g: &Graph, shapes: &[Shape], from: &str, to: &str) -> Result<Graph, MorphError> {
    let (a, b) = (index_of(g, from)?, index_of(g, to)?);
    let chain = chain_before_pool(g);
    let (pa, pb) = (
        chain.iter().position(|&n| n == a),
        chain.iter().position(|&n| n == b),
    );
    let ok =
        matches!(g.nodes[a].layer, Layer::Relu) && matches!(g.nodes[b].layer, Layer::BatchNorm);
    if !ok || pa.is_none() || pb.is_none() || pa >= pb {
        return Err(MorphError::Target(format!(
                "a skip needs a main-chain ReLU ({from:?}) before a main-chain BN ({to:?}), both before pooling"
            )));
    }
    let (sa, sb) = (shapes[a], shapes[b]);
    let p = fresh(g, "skip");
    let mut new = Vec::new();
    let shortcut = if sa == sb {
        a
    } else {
        let stride = projection_stride(sa, sb)
            .ok_or_else(|| MorphError::Target(format!("no 1x1 projection maps {sa} onto {sb}")))?;
        let conv = Layer::Conv2d {
            out_channels: sb.c,
            kernel: 1,
            stride,
            padding: 0,
        };
        new.push((format!("{p}.proj.conv"), conv, vec![a]));
        new.push((format!("{p}.proj.bn"), Layer::BatchNorm, vec![b + 1]));
        b + 2
    };
    new.push((format!("{p}.add"), Layer::Add, vec![b, shortcut]));
    Ok(insert_after(g, b, new))
}

/// The search's limits on layers, parameters and width.
fn check_limits(out: &Graph, limits: &Limits) -> Result<(), MorphError> {
    let count = OpCount::of(out)?;
    if out.nodes.len() > limits.max_layers {
        return Err(MorphError::Limit(format!(
            "{} layers > {}",
            out.nodes.len(),
            limits.max_layers
        )));
    }
    if count.params > limits.max_params {
        return Err(MorphError::Limit(format!(
            "{} parameters > {}",
            count.params, limits.max_params
        )));
    }
    if let Some(w) = out.nodes.iter().find_map(|n| match n.layer {
        Layer::Conv2d { out_channels, .. } if out_channels > limits.max_width => Some(out_channels),
        _ => None,
    }) {
        return Err(MorphError::Limit(format!(
            "{w} channels > {}",
            limits.max_width
        )));
    }
    Ok(())
}

/// The stride of a 1×1 convolution that maps resolution `a` onto `b`, if any.
fn projection_stride(a: Shape, b: Shape) -> Option<u32> {
    let s = a.h.div_ceil(b.h).max(1);
    let out = |n: u32| (n - 1) / s + 1;
    (out(a.h) == b.h && out(a.w) == b.w).then_some(s)
}

/// The three kinds, for drawing one uniformly.
const KINDS: [u8; 3] = [0, 1, 2];

/// Draws one random legal morphism of `g` (kind uniformly, then target uniformly), trying
/// up to `tries` draws; `None` if none applied (e.g. every result breaks the limits).
pub fn random_morphism(
    g: &Graph,
    kernel: u32,
    limits: &Limits,
    rng: &mut impl Rng,
    tries: usize,
) -> Option<(Morphism, Graph)> {
    let chain = chain_before_pool(g);
    let relus: Vec<&Node> = chain
        .iter()
        .map(|&i| &g.nodes[i])
        .filter(|n| matches!(n.layer, Layer::Relu))
        .collect();
    let bns: Vec<usize> = chain
        .iter()
        .copied()
        .filter(|&i| matches!(g.nodes[i].layer, Layer::BatchNorm))
        .collect();
    let widenable: Vec<&Node> = g
        .main_chain()
        .into_iter()
        .filter(|&i| i != g.output())
        .map(|i| &g.nodes[i])
        .filter(|n| matches!(n.layer, Layer::Conv2d { .. } | Layer::Dense { .. }))
        .collect();
    for _ in 0..tries {
        let m = match KINDS.choose(rng)? {
            0 => Morphism::Deeper {
                after: relus.choose(rng)?.name.clone(),
                kernel,
            },
            1 => Morphism::Wider {
                layer: widenable.choose(rng)?.name.clone(),
            },
            _ => {
                let from = *relus.choose(rng)?;
                let pos = chain.iter().position(|&i| g.nodes[i].name == from.name)?;
                let later: Vec<usize> = bns
                    .iter()
                    .copied()
                    .filter(|&b| chain.iter().position(|&i| i == b) > Some(pos))
                    .collect();
                let Some(&to) = later.choose(rng) else {
                    continue;
                };
                Morphism::Skip {
                    from: from.name.clone(),
                    to: g.nodes[to].name.clone(),
                }
            }
        };
        if let Ok(out) = m.apply(g, limits) {
            return Some((m, out));
        }
    }
    None
}

#[cfg(test)]
mod tests;
