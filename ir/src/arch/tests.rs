//! IR tests: the initial models' shapes, validation errors, serialisation, descriptors.

use super::*;

fn r50() -> Graph {
    resnet50(Shape::new(3, 224, 224), 1000)
}

fn shape_of(g: &Graph, shapes: &[Shape], name: &str) -> Shape {
    let i = g
        .nodes
        .iter()
        .position(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node {name}"));
    shapes[i]
}

#[test]
fn resnet50_follows_the_aiperf_layout() {
    let g = r50();
    let s = g.shapes().unwrap();
    assert_eq!(shape_of(&g, &s, "stem.relu"), Shape::new(64, 112, 112));
    assert_eq!(shape_of(&g, &s, "stem.pool"), Shape::new(64, 56, 56));
    assert_eq!(
        shape_of(&g, &s, "stage1.block2.relu"),
        Shape::new(256, 56, 56)
    );
    // Stride 2 on the first 1×1 conv of stages 2–4, not on the 3×3.
    assert_eq!(
        shape_of(&g, &s, "stage2.block0.1.conv"),
        Shape::new(128, 28, 28)
    );
    assert_eq!(
        shape_of(&g, &s, "stage2.block0.proj.conv"),
        Shape::new(512, 28, 28)
    );
    assert!(matches!(
        g.nodes[g
            .nodes
            .iter()
            .position(|n| n.name == "stage2.block0.2.conv")
            .unwrap()]
        .layer,
        Layer::Conv2d {
            stride: 1,
            kernel: 3,
            ..
        }
    ));
    assert_eq!(
        shape_of(&g, &s, "stage4.block2.relu"),
        Shape::new(2048, 7, 7)
    );
    assert_eq!(*s.last().unwrap(), Shape::new(1000, 1, 1));
    let count = |kind: &str| g.nodes.iter().filter(|n| n.layer.kind() == kind).count();
    assert_eq!(
        (
            count("conv2d"),
            count("batch_norm"),
            count("add"),
            count("dense")
        ),
        (53, 53, 16, 1)
    );
    assert_eq!(g.num_classes(), 1000);
}

#[test]
fn cifar_resnets_fit_any_input_and_class_count() {
    let g = cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10);
    let s = g.shapes().unwrap();
    assert_eq!(shape_of(&g, &s, "stem.relu"), Shape::new(16, 32, 32));
    assert_eq!(shape_of(&g, &s, "stage3.block2.relu"), Shape::new(64, 8, 8));
    assert_eq!(
        g.nodes
            .iter()
            .filter(|n| n.layer.kind() == "conv2d")
            .count(),
        19 + 2
    );
    let g = cifar_resnet(&CifarResnetConfig::resnet18(), Shape::new(1, 28, 28), 7);
    let s = g.shapes().unwrap();
    assert_eq!(
        shape_of(&g, &s, "stage4.block1.relu"),
        Shape::new(512, 4, 4)
    );
    assert_eq!(*s.last().unwrap(), Shape::new(7, 1, 1));
}

#[test]
fn json_and_bincode_round_trip() {
    for g in [
        r50(),
        cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(1, 28, 28), 10),
    ] {
        assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);
        assert_eq!(Graph::from_bincode(&g.to_bincode()).unwrap(), g);
    }
    let json = r50().to_json();
    assert!(
        json.contains("\"conv2d\": {") && json.contains("\"layer\": \"relu\""),
        "{}",
        &json[..400]
    );
}

/// input 3×8×8 → conv → bn → relu → gap → fc(10)
fn tiny() -> Graph {
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
    g.push("bn", Layer::BatchNorm, &[1]);
    g.push("relu", Layer::Relu, &[2]);
    g.push("pool", Layer::GlobalAvgPool, &[3]);
    g.push("fc", Layer::Dense { out_features: 10 }, &[4]);
    g
}

fn problem(g: &Graph) -> String {
    g.validate().unwrap_err().to_string()
}

#[test]
fn malformed_graphs_name_the_node_and_the_problem() {
    tiny().validate().unwrap();

    let mut g = tiny();
    g.nodes[2].inputs = vec![3];
    assert_eq!(
        problem(&g),
        "node 2 (\"bn\", batch_norm): reads node 3, which does not come before it"
    );

    let mut g = tiny();
    g.nodes[5].inputs = vec![3];
    assert!(
        problem(&g).contains("\"fc\", dense): input 4x8x8 is not flat"),
        "{}",
        problem(&g)
    );

    let mut g = tiny();
    g.nodes[1].layer = Layer::Conv2d {
        out_channels: 4,
        kernel: 11,
        stride: 1,
        padding: 1,
    };
    assert!(problem(&g).contains("kernel 11, stride 1, padding 1 does not fit input 3x8x8"));

    let mut g = tiny();
    g.nodes[1].layer = Layer::Conv2d {
        out_channels: 4,
        kernel: 3,
        stride: 0,
        padding: 1,
    };
    assert!(problem(&g).contains("does not fit"));

    let mut g = tiny();
    g.push("add", Layer::Add, &[0, 3]);
    assert!(problem(&g).contains("\"add\", add): inputs of different shapes: 3x8x8 and 4x8x8"));

    let mut g = tiny();
    g.nodes[3].layer = Layer::Add;
    assert!(problem(&g).contains("needs at least 2 inputs, has 1"));

    let mut g = tiny();
    g.nodes[4].inputs = vec![2]; // relu left dangling
    assert_eq!(
        problem(&g),
        "node 3 (\"relu\", relu): its output is never used"
    );

    let mut g = tiny();
    g.nodes[2].name = "conv".into();
    assert!(problem(&g).contains("duplicate node name"));

    let mut g = tiny();
    g.nodes.pop();
    assert!(problem(&g).contains("the output must be a dense layer"));

    assert!(problem(&Graph::default()).contains("must start with one Input node"));
    let mut g = tiny();
    g.nodes[3].layer = Layer::Input {
        shape: Shape::new(4, 8, 8),
    };
    g.nodes[3].inputs.clear();
    g.nodes[2].name = "bn".into();
    assert!(
        problem(&g).contains("only node 0 may be the input"),
        "{}",
        problem(&g)
    );

    let e =
        Graph::from_json("{\"nodes\": [{\"name\": \"x\", \"layer\": \"warp\", \"inputs\": []}]}")
            .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("architecture JSON: unknown variant `warp`"),
        "{e}"
    );
}

#[test]
fn concat_adds_channels() {
    let mut g = Graph::default();
    g.push(
        "input",
        Layer::Input {
            shape: Shape::new(3, 8, 8),
        },
        &[],
    );
    g.push(
        "a",
        Layer::Conv2d {
            out_channels: 5,
            kernel: 1,
            stride: 1,
            padding: 0,
        },
        &[0],
    );
    g.push("cat", Layer::Concat, &[1, 0]);
    g.push("pool", Layer::GlobalAvgPool, &[2]);
    g.push("fc", Layer::Dense { out_features: 2 }, &[3]);
    assert_eq!(g.shapes().unwrap()[2], Shape::new(8, 8, 8));
    let d = g.descriptor();
    assert_eq!(
        d.skips,
        vec![Skip {
            from: 0,
            to: 2,
            kind: SkipKind::Concat
        }]
    );
}

#[test]
fn resnet50_descriptor_has_its_sixteen_shortcuts() {
    let g = r50();
    let d = g.descriptor();
    // Main chain: every node except the four projection conv+bn pairs.
    assert_eq!(d.layers.len(), g.nodes.len() - 1 - 8);
    assert_eq!(d.skips.len(), 16);
    assert!(d
        .skips
        .iter()
        .all(|s| s.from < s.to && s.kind == SkipKind::Add));
    // A bottleneck spans 8 chain layers from its input to its add (3×(conv, bn) + 2 relu).
    assert!(d.skips.iter().all(|s| s.to - s.from == 9), "{:?}", d.skips);
    assert_eq!(
        d.layers[0],
        ChainLayer {
            kind: LayerKind::Conv2d,
            width: 64,
            kernel: 7,
            stride: 2,
            padding: 3
        }
    );
    assert_eq!(d.layers.last().unwrap().width, 1000);
}
