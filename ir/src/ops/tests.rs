//! Op-count tests: docs/design.md §4's reference figures and a graph counted by hand.

use super::*;
use crate::arch::{cifar_resnet, resnet50, CifarResnetConfig, Graph, Layer, Shape};

fn r50() -> Graph {
    resnet50(Shape::new(3, 224, 224), 1000)
}

#[test]
fn resnet50_matches_the_reference_profiler_exactly() {
    let c = OpCount::of(&r50()).unwrap();
    assert_eq!(c.fp_per_image, 7_806_583_495);
    assert_eq!(c.params, 25_557_032);
}

#[test]
fn torchvision_stride_placement_gives_its_figure() {
    // Move the stride of stages 2–4 from the first 1×1 conv to the 3×3 (torchvision v1.5).
    let mut g = r50();
    for stage in 2..=4 {
        for (name, stride) in [("1", 1), ("2", 2)] {
            let n = format!("stage{stage}.block0.{name}.conv");
            let node = g.nodes.iter_mut().find(|x| x.name == n).unwrap();
            let Layer::Conv2d { stride: s, .. } = &mut node.layer else {
                panic!()
            };
            *s = stride;
        }
    }
    let c = OpCount::of(&g).unwrap();
    assert_eq!(c.fp_per_image, 8_273_220_295);
    assert_eq!(c.params, 25_557_032);
}

#[test]
fn hand_counted_small_graph() {
    // input 3×8×8 → conv 3×3 (4) → bn → relu → maxpool 2/2 → gap → fc 10
    let mut g = Graph::default();
    g.push(
        "input",
        Layer::Input {
            shape: Shape::new(3, 8, 8),
        },
        &[],
    );
    g.push(
        "conv",
        Layer::Conv2d {
            out_channels: 4,
            kernel: 3,
            stride: 1,
            padding: 1,
        },
        &[0],
    );
    g.push(
        "conv2",
        Layer::Conv2d {
            out_channels: 6,
            kernel: 1,
            stride: 1,
            padding: 0,
        },
        &[1],
    );
    g.push("bn", Layer::BatchNorm, &[2]);
    g.push("relu", Layer::Relu, &[3]);
    g.push(
        "pool",
        Layer::MaxPool {
            kernel: 2,
            stride: 2,
            padding: 0,
        },
        &[4],
    );
    g.push("gap", Layer::GlobalAvgPool, &[5]);
    g.push("fc", Layer::Dense { out_features: 10 }, &[6]);
    let c = OpCount::of(&g).unwrap();
    let by_name = |n: &str| c.layers.iter().find(|l| l.name == n).unwrap().clone();
    let conv = by_name("conv");
    assert_eq!(
        (conv.fp, conv.bp, conv.params),
        (2 * 9 * 3 * 4 * 64, 2 * 9 * 3 * 4 * 64, 108)
    );
    let conv2 = by_name("conv2");
    assert_eq!(
        (conv2.fp, conv2.bp, conv2.params),
        (2 * 4 * 6 * 64, 2 * 2 * 4 * 6 * 64, 24)
    );
    assert_eq!((by_name("bn").fp, by_name("bn").params), (7 * 6 * 64, 12));
    assert_eq!(by_name("relu").fp, 6 * 64);
    assert_eq!(by_name("pool").fp, 6 * 64 * 4 / 4);
    assert_eq!(by_name("gap").fp, (16 - 1) * 6 + 4 * 6);
    let fc = by_name("fc");
    assert_eq!((fc.fp, fc.bp, fc.params), (2 * 6 * 10, 4 * 6 * 10, 70));
    assert_eq!(c.softmax_fp, 80 + 9 + 40);
    let fp = 13_824 + 3072 + 2688 + 384 + 384 + 114 + 120 + 129;
    assert_eq!(c.fp_per_image, fp);
    let bp = 13_824 + 6144 + 240;
    assert_eq!(c.bp_per_image, bp);
    assert_eq!(c.params, 108 + 24 + 12 + 70);
    assert_eq!(c.update_per_step(), 2 * 214);
    // An epoch of 1000 images in 8 steps, and its validation.
    assert_eq!(c.train_epoch(1000, 8), 1000 * u128::from(fp + bp) + 8 * 428);
    assert_eq!(c.eval_epoch(300), 300 * u128::from(fp));
}

#[test]
fn epoch_totals_do_not_overflow_at_machine_scale() {
    let c = OpCount::of(&r50()).unwrap();
    // A year of ImageNet epochs on a large machine exceeds 2^64 operations.
    let images = 1_281_167u64 * 100_000;
    let total = c.train_epoch(images, images / 256);
    assert!(total > u128::from(u64::MAX));
    assert_eq!(
        total,
        u128::from(images) * u128::from(c.train_per_image())
            + u128::from(images / 256) * u128::from(2 * c.params)
    );
}

#[test]
fn the_reference_training_figure_differs_by_update_and_a_per_bn_constant() {
    // docs/design.md §4: the AIPerf profiler's 23,053,458,315 training operations per image differ
    // from these rules' FP + BP only by its per-image parameter update and a constant per
    // BatchNorm layer. Its update covers the conv and dense weights (2 per weight), and what
    // remains is 36 per BN layer — any change to a conv, dense, BN or pooling rule breaks this.
    let c = OpCount::of(&r50()).unwrap();
    let weights: u64 = c
        .layers
        .iter()
        .filter(|l| l.kind == "conv2d" || l.kind == "dense")
        .map(|l| l.params)
        .sum();
    assert_eq!(
        weights,
        25_557_032 - 53_120,
        "BN layers hold 53,120 parameters"
    );
    let bn_layers = c.layers.iter().filter(|l| l.kind == "batch_norm").count() as i128;
    let rest = 23_053_458_315i128 - i128::from(c.train_per_image()) - 2 * i128::from(weights);
    assert_eq!(
        rest,
        36 * bn_layers,
        "remainder {rest} over {bn_layers} BN layers"
    );
}

#[test]
fn small_resnets_count_consistently() {
    let g = cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10);
    let c = OpCount::of(&g).unwrap();
    // The stem reads the input: its BP is FP only.
    assert_eq!(c.layers[1].bp, c.layers[1].fp);
    assert!(c
        .layers
        .iter()
        .filter(|l| l.kind == "conv2d")
        .skip(1)
        .all(|l| l.bp == 2 * l.fp));
    assert_eq!(c.params, c.layers.iter().map(|l| l.params).sum::<u64>());
}

/// Regression: `aiperf ops --input 4000000000x4000000000x3` exited 0 with wrapped counts.
#[test]
fn regression_huge_input_is_an_error_not_a_wrapped_count() {
    let g = crate::arch::resnet50(Shape::new(3, 4_000_000_000, 4_000_000_000), 1000);
    let e = OpCount::of(&g).unwrap_err().to_string();
    assert!(e.contains("exceeds 2^64"), "{e}");
    // The largest sensible inputs still count.
    assert!(OpCount::of(&crate::arch::resnet50(Shape::new(3, 4096, 4096), 1000)).is_ok());
}

/// A max-pool between the input and the first conv does not give that conv an input
/// gradient: only a trainable layer upstream does (as PyTorch's FlopCounterMode counts it;
/// the search never produces this graph).
#[test]
fn a_conv_behind_a_pool_on_the_input_has_no_input_gradient() {
    let mut g = Graph::default();
    g.push(
        "input",
        Layer::Input {
            shape: Shape::new(3, 8, 8),
        },
        &[],
    );
    let pool = g.push(
        "pool",
        Layer::MaxPool {
            kernel: 2,
            stride: 2,
            padding: 0,
        },
        &[0],
    );
    let conv = |c| Layer::Conv2d {
        out_channels: c,
        kernel: 3,
        stride: 1,
        padding: 1,
    };
    let c1 = g.push("c1", conv(4), &[pool]);
    let c2 = g.push("c2", conv(4), &[c1]);
    let gap = g.push("gap", Layer::GlobalAvgPool, &[c2]);
    g.push("fc", Layer::Dense { out_features: 2 }, &[gap]);
    let count = OpCount::of(&g).unwrap();
    let by_name = |n: &str| count.layers.iter().find(|l| l.name == n).unwrap().clone();
    assert_eq!(by_name("c1").bp, by_name("c1").fp);
    assert_eq!(by_name("c2").bp, 2 * by_name("c2").fp);
}
