//! Morphism tests: each kind's exact effect, refusals, and random chains (property tests).

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::arch::{cifar_resnet, resnet50, CifarResnetConfig};

fn r20() -> Graph {
    cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10)
}

fn count(g: &Graph) -> OpCount {
    OpCount::of(g).unwrap()
}

#[test]
fn deeper_inserts_a_kxk_block_whose_kernel_shows_in_the_count() {
    let g = r20();
    let base = count(&g);
    for k in [3u32, 5, 7] {
        let m = Morphism::Deeper {
            after: "stage2.block1.relu".into(),
            kernel: k,
        };
        let d = m.apply(&g, &Limits::default()).unwrap();
        assert_eq!(d.nodes.len(), g.nodes.len() + 3);
        let c = count(&d);
        // 32 channels at 16×16: conv k²·32·32 weights + BN 2·32.
        let (k2, ch, hw) = (u64::from(k * k), 32u64, 256u64);
        assert_eq!(c.params - base.params, k2 * ch * ch + 2 * ch, "k={k}");
        assert_eq!(
            c.fp_per_image - base.fp_per_image,
            2 * k2 * ch * ch * hw + 7 * ch * hw + ch * hw
        );
        // The block sits on the main chain, and the old readers now read its ReLU.
        let i = d
            .nodes
            .iter()
            .position(|n| n.name == "deeper0.relu")
            .unwrap();
        let readers: Vec<&str> = d
            .nodes
            .iter()
            .filter(|n| n.inputs.contains(&i))
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(readers, vec!["stage2.block2.1.conv", "stage2.block2.add"]);
        assert!(d.main_chain().contains(&i));
    }
    let d3 = Morphism::Deeper {
        after: "stem.relu".into(),
        kernel: 3,
    }
    .apply(&g, &Limits::default())
    .unwrap();
    let d7 = Morphism::Deeper {
        after: "stem.relu".into(),
        kernel: 7,
    }
    .apply(&g, &Limits::default())
    .unwrap();
    assert_ne!(
        d3.descriptor(),
        d7.descriptor(),
        "the kernel size reaches the search descriptor"
    );
}

#[test]
fn wider_doubles_a_conv_and_the_next_layers_follow() {
    let g = r20();
    let w = Morphism::Wider {
        layer: "stage1.block0.1.conv".into(),
    }
    .apply(&g, &Limits::default())
    .unwrap();
    let s = w.shapes().unwrap();
    let at = |n: &str| w.nodes.iter().position(|x| x.name == n).unwrap();
    assert_eq!(s[at("stage1.block0.1.relu")].c, 32);
    assert_eq!(
        s[at("stage1.block0.2.conv")].c,
        16,
        "the next conv keeps its outputs"
    );
    // Params: the conv (9·16·16 more), its BN (2·16), the next conv's inputs (9·16·16).
    assert_eq!(
        count(&w).params - count(&g).params,
        2 * 9 * 16 * 16 + 2 * 16
    );
    // A conv whose output meets a shortcut cannot be widened alone.
    let e = Morphism::Wider {
        layer: "stage1.block0.2.conv".into(),
    }
    .apply(&g, &Limits::default())
    .unwrap_err();
    assert!(matches!(e, MorphError::Invalid(_)), "{e}");
    let e = Morphism::Wider { layer: "fc".into() }
        .apply(&g, &Limits::default())
        .unwrap_err();
    assert!(e.to_string().contains("not a conv or hidden dense"), "{e}");
}

#[test]
fn skip_adds_a_projected_shortcut_when_shapes_differ() {
    let g = r20();
    let m = Morphism::Skip {
        from: "stem.relu".into(),
        to: "stage3.block0.2.bn".into(),
    };
    let s = m.apply(&g, &Limits::default()).unwrap();
    let proj = s
        .nodes
        .iter()
        .find(|n| n.name == "skip0.proj.conv")
        .unwrap();
    assert_eq!(
        proj.layer,
        Layer::Conv2d {
            out_channels: 64,
            kernel: 1,
            stride: 4,
            padding: 0
        }
    );
    assert_eq!(s.descriptor().skips.len(), g.descriptor().skips.len() + 1);
    // Same shape: a bare Add, no parameters.
    let m = Morphism::Skip {
        from: "stage1.block0.relu".into(),
        to: "stage1.block2.2.bn".into(),
    };
    let s = m.apply(&g, &Limits::default()).unwrap();
    assert_eq!(s.nodes.len(), g.nodes.len() + 1);
    assert_eq!(count(&s).params, count(&g).params);
    assert_eq!(
        count(&s).fp_per_image,
        count(&g).fp_per_image + 16 * 32 * 32
    );
}

#[test]
fn refusals_name_the_problem() {
    let g = r20();
    let l = Limits::default();
    let err = |m: Morphism| m.apply(&g, &l).unwrap_err().to_string();
    assert!(err(Morphism::Deeper {
        after: "stem.bn".into(),
        kernel: 3
    })
    .contains("not a ReLU on the main chain"));
    assert!(err(Morphism::Deeper {
        after: "stem.relu".into(),
        kernel: 4
    })
    .contains("must be odd"));
    assert!(err(Morphism::Deeper {
        after: "nope".into(),
        kernel: 3
    })
    .contains("no node named \"nope\""));
    assert!(err(Morphism::Skip {
        from: "stage2.block0.relu".into(),
        to: "stem.bn".into()
    })
    .contains("before a main-chain BN"));
    let tight = Limits {
        max_layers: g.nodes.len() + 2,
        ..Limits::default()
    };
    let e = Morphism::Deeper {
        after: "stem.relu".into(),
        kernel: 3,
    }
    .apply(&g, &tight)
    .unwrap_err();
    assert!(matches!(e, MorphError::Limit(_)), "{e}");
    let tight = Limits {
        max_params: count(&g).params,
        ..Limits::default()
    };
    assert!(Morphism::Wider {
        layer: "stem.conv".into()
    }
    .apply(&g, &tight)
    .is_err());
}

/// Random chains: every step validates (apply validates), stays within the limits, grows the
/// forward count strictly and never shrinks the parameters.
fn random_chains(start: &Graph, chains: usize, length: usize, seed: u64) -> Vec<Graph> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let limits = Limits {
        max_params: 60_000_000,
        ..Limits::default()
    };
    let mut ends = Vec::new();
    for _ in 0..chains {
        let mut g = start.clone();
        let mut c = count(&g);
        for _ in 0..length {
            let kernel = [3, 5, 7][rng.random_range(0..3)];
            let Some((m, next)) = random_morphism(&g, kernel, &limits, &mut rng, 20) else {
                break;
            };
            let n = count(&next);
            assert!(n.fp_per_image > c.fp_per_image, "{m:?} did not add work");
            assert!(n.params >= c.params, "{m:?} lost parameters");
            match m {
                Morphism::Deeper { .. } | Morphism::Wider { .. } => assert!(n.params > c.params),
                Morphism::Skip { .. } => assert_eq!(
                    next.descriptor().skips.len(),
                    g.descriptor().skips.len() + 1
                ),
            }
            assert!(next.nodes.len() <= limits.max_layers && n.params <= limits.max_params);
            g = next;
            c = n;
        }
        ends.push(g);
    }
    ends
}

#[test]
fn thousands_of_random_chains_from_a_small_resnet_stay_valid() {
    let start = cifar_resnet(
        &CifarResnetConfig {
            blocks: vec![1, 1],
            width: 8,
        },
        Shape::new(3, 16, 16),
        5,
    );
    let ends = random_chains(&start, 2000, 6, 11);
    assert!(ends.iter().filter(|g| **g != start).count() > 1990);
}

#[test]
fn random_chains_from_resnet50_stay_valid() {
    let start = resnet50(Shape::new(3, 224, 224), 1000);
    random_chains(&start, 300, 4, 12);
}

#[test]
fn a_sample_of_morphed_models_builds_and_runs_in_libtorch() {
    use tch::nn::ModuleT;
    let start = cifar_resnet(
        &CifarResnetConfig {
            blocks: vec![1, 1],
            width: 8,
        },
        Shape::new(3, 16, 16),
        5,
    );
    for g in random_chains(&start, 12, 5, 13) {
        let vs = tch::nn::VarStore::new(tch::Device::Cpu);
        let net = crate::model::Net::build(&vs.root(), &g).unwrap();
        let n: i64 = vs
            .trainable_variables()
            .iter()
            .map(|t| t.numel() as i64)
            .sum();
        assert_eq!(n as u64, count(&g).params);
        let y = net.forward_t(
            &tch::Tensor::randn([2, 3, 16, 16], tch::kind::FLOAT_CPU),
            true,
        );
        assert_eq!(y.size(), vec![2, 5]);
    }
    // And a morphed ResNet-50 on a tiny 64×64 input.
    let start = resnet50(Shape::new(3, 64, 64), 10);
    let g = random_chains(&start, 1, 3, 14).pop().unwrap();
    let vs = tch::nn::VarStore::new(tch::Device::Cpu);
    let net = crate::model::Net::build(&vs.root(), &g).unwrap();
    let y = net.forward_t(
        &tch::Tensor::randn([1, 3, 64, 64], tch::kind::FLOAT_CPU),
        false,
    );
    assert_eq!(y.size(), vec![1, 10]);
}
