//! Model-building tests: parameter counts, per-node shapes against the IR, training steps
//! lower the loss, and JSON round trips.

use tch::nn::{ModuleT, OptimizerConfig};
use tch::{nn, Device, Kind, Tensor};

use super::*;
use crate::arch::{cifar_resnet, resnet50, CifarResnetConfig};
use crate::ops::OpCount;

fn param_count(vs: &nn::VarStore) -> i64 {
    vs.trainable_variables()
        .iter()
        .map(|t| t.numel() as i64)
        .sum()
}

/// Every node's output has the IR's inferred shape (flat outputs count as C×1×1).
fn assert_shapes_match(net: &Net, x: &Tensor) {
    let outs = net.forward_nodes(x, false, true);
    for (i, (t, s)) in outs.iter().zip(net.shapes()).enumerate() {
        let size = t.size();
        let got = match size[..] {
            [_, c, h, w] => (c, h, w),
            [_, c] => (c, 1, 1),
            _ => panic!("node {i}: unexpected rank {size:?}"),
        };
        assert_eq!(
            got,
            (i64::from(s.c), i64::from(s.h), i64::from(s.w)),
            "node {i}"
        );
    }
}

#[test]
fn resnet50_has_torchvisions_parameter_count_and_ir_shapes() {
    let g = resnet50(Shape::new(3, 224, 224), 1000);
    let vs = nn::VarStore::new(Device::Cpu);
    let net = Net::build(&vs.root(), &g).unwrap();
    assert_eq!(param_count(&vs), 25_557_032);
    assert_eq!(param_count(&vs) as u64, OpCount::of(&g).unwrap().params);
    let names = vs.variables();
    assert!(
        names.contains_key("stage2.block0.1.conv.weight"),
        "{:?}",
        names.keys().take(5).collect::<Vec<_>>()
    );
    assert!(names.contains_key("fc.bias"));
    assert_shapes_match(
        &net,
        &Tensor::randn([1, 3, 224, 224], (Kind::Float, Device::Cpu)),
    );
}

#[test]
fn small_resnets_match_ir_shapes_and_op_count_params() {
    for (cfg, input, classes) in [
        (CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10),
        (CifarResnetConfig::resnet18(), Shape::new(1, 28, 28), 10),
        (
            CifarResnetConfig {
                blocks: vec![1, 1],
                width: 8,
            },
            Shape::new(3, 17, 23),
            5,
        ),
    ] {
        let g = cifar_resnet(&cfg, input, classes);
        let vs = nn::VarStore::new(Device::Cpu);
        let net = Net::build(&vs.root(), &g).unwrap();
        assert_eq!(
            param_count(&vs) as u64,
            OpCount::of(&g).unwrap().params,
            "{cfg:?}"
        );
        let x = Tensor::randn(
            [
                2,
                i64::from(input.c),
                i64::from(input.h),
                i64::from(input.w),
            ],
            (Kind::Float, Device::Cpu),
        );
        assert_shapes_match(&net, &x);
        assert_eq!(net.forward_t(&x, true).size(), vec![2, i64::from(classes)]);
    }
}

#[test]
fn resnet20_has_its_published_size() {
    // He et al. 2016: ResNet-20 for CIFAR-10 has 0.27M parameters (here with 1×1 projections).
    let g = cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10);
    let vs = nn::VarStore::new(Device::Cpu);
    Net::build(&vs.root(), &g).unwrap();
    let n = param_count(&vs);
    assert!((265_000..280_000).contains(&n), "{n}");
}

#[test]
fn sgd_steps_lower_the_loss_on_a_fixed_batch() {
    tch::manual_seed(0);
    let g = cifar_resnet(
        &CifarResnetConfig {
            blocks: vec![1, 1],
            width: 8,
        },
        Shape::new(3, 16, 16),
        4,
    );
    let vs = nn::VarStore::new(Device::Cpu);
    let net = Net::build(&vs.root(), &g).unwrap();
    let x = Tensor::randn([16, 3, 16, 16], (Kind::Float, Device::Cpu));
    let y = Tensor::from_slice(&[0i64, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]);
    let mut opt = nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(&vs, 0.05)
    .unwrap();
    let loss = |train| net.forward_t(&x, train).cross_entropy_for_logits(&y);
    let before = tch::no_grad(|| loss(true)).double_value(&[]);
    for _ in 0..40 {
        opt.backward_step(&loss(true));
    }
    let after = tch::no_grad(|| loss(true)).double_value(&[]);
    assert!(after < 0.5 * before, "loss {before} -> {after}");
}

#[test]
fn json_rebuild_gives_the_same_parameters_and_shapes() {
    let g = cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10);
    let g2 = Graph::from_json(&g.to_json()).unwrap();
    let (vs1, vs2) = (
        nn::VarStore::new(Device::Cpu),
        nn::VarStore::new(Device::Cpu),
    );
    let n1 = Net::build(&vs1.root(), &g).unwrap();
    let n2 = Net::build(&vs2.root(), &g2).unwrap();
    assert_eq!(n1.shapes(), n2.shapes());
    let shapes = |vs: &nn::VarStore| -> Vec<(String, Vec<i64>)> {
        let mut v: Vec<_> = vs
            .variables()
            .into_iter()
            .map(|(k, t)| (k, t.size()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(shapes(&vs1), shapes(&vs2));
}
