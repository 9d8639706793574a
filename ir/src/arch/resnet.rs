//! Initial models: ResNet-50 v1 in the AIPerf reference layout (stride 2 on the first 1×1
//! convolution of stages 2–4) and CIFAR-style ResNets (3×3 stem, no max-pool) of any depth,
//! width, input and class count.

use super::{Graph, Layer, Shape};

/// Appends conv → batch-norm (→ ReLU); returns the last node.
fn conv_bn(g: &mut Graph, name: &str, x: usize, out: u32, k: u32, s: u32, relu: bool) -> usize {
    let conv = Layer::Conv2d {
        out_channels: out,
        kernel: k,
        stride: s,
        padding: k / 2,
    };
    let c = g.push(format!("{name}.conv"), conv, &[x]);
    let b = g.push(format!("{name}.bn"), Layer::BatchNorm, &[c]);
    if relu {
        g.push(format!("{name}.relu"), Layer::Relu, &[b])
    } else {
        b
    }
}

/// Global average pool → dense classifier.
fn head(g: &mut Graph, x: usize, classes: u32) -> Graph {
    let p = g.push("pool", Layer::GlobalAvgPool, &[x]);
    g.push(
        "fc",
        Layer::Dense {
            out_features: classes,
        },
        &[p],
    );
    std::mem::take(g)
}

/// A graph holding only its input.
fn start(input: Shape) -> Graph {
    let mut g = Graph::default();
    g.push("input", Layer::Input { shape: input }, &[]);
    g
}

/// A bottleneck block: 1×1 (stride `s`) → 3×3 → 1×1 (×4), projection when the shape
/// changes, add, ReLU.
fn bottleneck(g: &mut Graph, name: &str, x: usize, in_c: u32, width: u32, s: u32) -> usize {
    let a = conv_bn(g, &format!("{name}.1"), x, width, 1, s, true);
    let b = conv_bn(g, &format!("{name}.2"), a, width, 3, 1, true);
    let c = conv_bn(g, &format!("{name}.3"), b, 4 * width, 1, 1, false);
    let shortcut = if s != 1 || in_c != 4 * width {
        conv_bn(g, &format!("{name}.proj"), x, 4 * width, 1, s, false)
    } else {
        x
    };
    let sum = g.push(format!("{name}.add"), Layer::Add, &[c, shortcut]);
    g.push(format!("{name}.relu"), Layer::Relu, &[sum])
}

/// ResNet-50 v1 as the AIPerf reference lays it out (docs/design.md §3): 7×7/2 stem with pad 3,
/// 3×3/2 max-pool with pad 1, bottleneck stages 3-4-6-3, the stride 2 of stages 2–4 on the
/// first 1×1 conv of the first block and its projection, global average pool, dense.
pub fn resnet50(input: Shape, classes: u32) -> Graph {
    let mut g = start(input);
    let stem = conv_bn(&mut g, "stem", 0, 64, 7, 2, true);
    let mut x = g.push(
        "stem.pool",
        Layer::MaxPool {
            kernel: 3,
            stride: 2,
            padding: 1,
        },
        &[stem],
    );
    let mut c = 64;
    for (stage, (&blocks, &width)) in [3, 4, 6, 3].iter().zip(&[64u32, 128, 256, 512]).enumerate() {
        for block in 0..blocks {
            let s = if block == 0 && stage > 0 { 2 } else { 1 };
            x = bottleneck(
                &mut g,
                &format!("stage{}.block{block}", stage + 1),
                x,
                c,
                width,
                s,
            );
            c = 4 * width;
        }
    }
    head(&mut g, x, classes)
}

/// A CIFAR-style ResNet of basic blocks (two 3×3 convs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CifarResnetConfig {
    /// Basic blocks per stage; the stages after the first halve the resolution.
    pub blocks: Vec<u32>,
    /// Channels of the stem and the first stage; each later stage doubles them.
    pub width: u32,
}

impl CifarResnetConfig {
    /// He et al.'s ResNet-20 for CIFAR: 3 stages of 3 blocks, 16-32-64 channels.
    pub fn resnet20() -> Self {
        CifarResnetConfig {
            blocks: vec![3, 3, 3],
            width: 16,
        }
    }

    /// ResNet-18's four stages of 2 blocks (64-128-256-512) with a 3×3 stem and no max-pool.
    pub fn resnet18() -> Self {
        CifarResnetConfig {
            blocks: vec![2, 2, 2, 2],
            width: 64,
        }
    }
}

/// A CIFAR-style ResNet for `input` images and `classes` classes: 3×3 stem, no max-pool,
/// basic blocks with a 1×1 projection where the shape changes.
pub fn cifar_resnet(cfg: &CifarResnetConfig, input: Shape, classes: u32) -> Graph {
    let mut g = start(input);
    let mut x = conv_bn(&mut g, "stem", 0, cfg.width, 3, 1, true);
    let mut c = cfg.width;
    for (stage, &blocks) in cfg.blocks.iter().enumerate() {
        let width = cfg.width << stage;
        for block in 0..blocks {
            let s = if block == 0 && stage > 0 { 2 } else { 1 };
            let name = format!("stage{}.block{block}", stage + 1);
            let a = conv_bn(&mut g, &format!("{name}.1"), x, width, 3, s, true);
            let b = conv_bn(&mut g, &format!("{name}.2"), a, width, 3, 1, false);
            let shortcut = if s != 1 || c != width {
                conv_bn(&mut g, &format!("{name}.proj"), x, width, 1, s, false)
            } else {
                x
            };
            let sum = g.push(format!("{name}.add"), Layer::Add, &[b, shortcut]);
            x = g.push(format!("{name}.relu"), Layer::Relu, &[sum]);
            c = width;
        }
    }
    head(&mut g, x, classes)
}

/// The built-in architectures by name: `resnet50`, `resnet8` (one block per stage, 16-32-64
/// channels: the small start of the Fashion-MNIST preset), `resnet20`, `resnet18`.
pub fn by_name(name: &str, input: Shape, classes: u32) -> Option<Graph> {
    match name {
        "resnet50" => Some(resnet50(input, classes)),
        "resnet8" => Some(cifar_resnet(
            &CifarResnetConfig {
                blocks: vec![1, 1, 1],
                width: 16,
            },
            input,
            classes,
        )),
        "resnet20" => Some(cifar_resnet(&CifarResnetConfig::resnet20(), input, classes)),
        "resnet18" => Some(cifar_resnet(&CifarResnetConfig::resnet18(), input, classes)),
        _ => None,
    }
}
