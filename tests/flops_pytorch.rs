//! aiperf's conv + dense forward counts against an independent counter: PyTorch's
//! `torch.utils.flop_counter.FlopCounterMode` on the same architectures rebuilt from the
//! IR's JSON by `scripts/bench/flops_torch.py`. Exact agreement required.
//!
//! Needs a Python with torch: `AIPERF_TORCH_PYTHON` (set by `make test`, which creates it
//! with scripts/dev/setup-torch-venv). Without it the test says so and passes, except under CI
//! (`CI` set), where a missing peer is a failure.

use std::path::Path;
use std::process::Command;

use aiperf::arch::{cifar_resnet, resnet50, CifarResnetConfig, Graph, Layer, Shape};
use aiperf::ops::OpCount;
use aiperf::search::{Limits, Morphism};

fn python() -> Option<String> {
    match std::env::var("AIPERF_TORCH_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var_os("CI").is_some()
            || std::env::var("AIPERF_REQUIRE_PREREQS").as_deref() == Ok("1") =>
        {
            panic!("AIPERF_TORCH_PYTHON is not set under make test: scripts/dev/setup-torch-venv creates it")
        }
        _ => {
            eprintln!("SKIP: set AIPERF_TORCH_PYTHON to a Python with torch (make test does: scripts/dev/setup-torch-venv)");
            None
        }
    }
}

fn torch_count(python: &str, g: &Graph) -> serde_json::Value {
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), g.to_json()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench/flops_torch.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A graph with a concatenation and a max-pool, beyond the ResNets.
fn concat_net() -> Graph {
    let mut g = Graph::default();
    g.push(
        "input",
        Layer::Input {
            shape: Shape::new(3, 20, 20),
        },
        &[],
    );
    g.push(
        "a",
        Layer::Conv2d {
            out_channels: 8,
            kernel: 5,
            stride: 2,
            padding: 2,
        },
        &[0],
    );
    g.push(
        "b",
        Layer::Conv2d {
            out_channels: 6,
            kernel: 3,
            stride: 1,
            padding: 1,
        },
        &[1],
    );
    g.push("cat", Layer::Concat, &[2, 1]);
    g.push(
        "pool",
        Layer::MaxPool {
            kernel: 3,
            stride: 2,
            padding: 1,
        },
        &[3],
    );
    g.push("gap", Layer::GlobalAvgPool, &[4]);
    g.push("fc1", Layer::Dense { out_features: 12 }, &[5]);
    g.push("fc2", Layer::Dense { out_features: 3 }, &[6]);
    g
}

/// ResNet-20 after one morphism of each kind: 5×5 and 7×7 deeper blocks, a widened conv and
/// a projected skip.
fn morphed() -> Graph {
    let mut g = cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10);
    let steps = [
        Morphism::Deeper {
            after: "stage1.block1.relu".into(),
            kernel: 5,
        },
        Morphism::Deeper {
            after: "stage3.block0.1.relu".into(),
            kernel: 7,
        },
        Morphism::Wider {
            layer: "stage2.block1.1.conv".into(),
        },
        Morphism::Skip {
            from: "stem.relu".into(),
            to: "stage3.block2.2.bn".into(),
        },
    ];
    for m in steps {
        g = m.apply(&g, &Limits::default()).unwrap();
    }
    g
}

#[test]
fn conv_and_dense_flops_agree_exactly_with_pytorch() {
    let Some(py) = python() else { return };
    let models = [
        (
            "resnet50 224x224x3",
            resnet50(Shape::new(3, 224, 224), 1000),
        ),
        (
            "resnet20 32x32x3",
            cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10),
        ),
        (
            "resnet18 28x28x1",
            cifar_resnet(&CifarResnetConfig::resnet18(), Shape::new(1, 28, 28), 10),
        ),
        ("concat net", concat_net()),
        ("morphed resnet20", morphed()),
    ];
    for (name, g) in models {
        let ours = OpCount::of(&g).unwrap();
        let conv_dense: u64 = ours
            .layers
            .iter()
            .filter(|l| l.kind == "conv2d" || l.kind == "dense")
            .map(|l| l.fp)
            .sum();
        let theirs = torch_count(&py, &g);
        assert_eq!(
            theirs["flops"].as_u64().unwrap(),
            conv_dense,
            "{name}: {theirs}"
        );
        assert_eq!(
            theirs["params"].as_u64().unwrap(),
            ours.params,
            "{name}: parameters"
        );
    }
}
