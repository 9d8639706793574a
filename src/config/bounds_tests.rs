//! Every number a preset file admits is safe: a property test over the printed presets'
//! numeric fields. Each field of each built-in preset is set to extreme values in turn; the
//! preset file is then either refused with a message naming the key, or accepted and the
//! optimizer it configures takes a step at the largest batch without panicking and with a
//! finite learning rate (libtorch's SGD converts its settings to single precision: a weight
//! decay of 1e308 once panicked there).

use serde_json::Value;
use tch::nn::OptimizerConfig;

use super::preset::{parse, Preset, PRESETS};
use crate::train::schedule::LrSchedule;

/// The values every numeric field is tried with.
const EXTREMES: [f64; 12] = [
    -1e308,
    -1.0,
    0.0,
    1e-308,
    1e-3,
    0.5,
    1.0,
    3.0,
    1e9,
    4294967296.0,
    1.8e19,
    1e308,
];

/// Paths (object keys and array indices) to every number in `v`, plus the optional counts.
fn numeric_paths(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Number(_) => out.push(at.clone()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push(i.to_string());
                numeric_paths(item, at, out);
                at.pop();
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                at.push(k.clone());
                numeric_paths(item, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn slot<'a>(v: &'a mut Value, path: &[String]) -> &'a mut Value {
    path.iter().fold(v, |v, key| match v {
        Value::Array(items) => &mut items[key.parse::<usize>().unwrap()],
        _ => &mut v[key.as_str()],
    })
}

/// `x` as JSON: an integer where it is one that JSON integers hold, else a float.
fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.2e18 {
        Value::from(x as i64)
    } else if x.fract() == 0.0 && (0.0..1.8446744073709552e19).contains(&x) {
        Value::from(x as u64)
    } else {
        Value::from(x)
    }
}

/// The optimizer a trial builds from `p`, at the largest global batch of one rank: one
/// step on a small layer must not panic and the schedule must stay finite.
fn takes_a_step(p: &Preset) -> Result<(), String> {
    let t = &p.train;
    let lr = t.lr_per_256 * f64::from(p.batch_size.1) / 256.0;
    let schedule = LrSchedule {
        base_lr: lr,
        warmup_epochs: t.warmup_epochs,
        total_epochs: f64::from(p.epochs),
    };
    for epoch in [0, 1, p.epochs / 2, p.epochs] {
        let r = schedule.lr(epoch, 1, 10);
        if !(r.is_finite() && (r as f32).is_finite()) {
            return Err(format!("learning rate {r} at epoch {epoch}"));
        }
    }
    std::panic::catch_unwind(|| {
        let vs = tch::nn::VarStore::new(tch::Device::Cpu);
        let layer = tch::nn::linear(vs.root(), 4, 2, Default::default());
        let mut opt = tch::nn::Sgd {
            momentum: t.momentum,
            wd: t.weight_decay,
            ..Default::default()
        }
        .build(&vs, lr)
        .unwrap();
        let x = tch::Tensor::ones([3, 4], (tch::Kind::Float, tch::Device::Cpu));
        let loss = x.apply(&layer).sum(tch::Kind::Float);
        opt.backward_step(&loss);
    })
    .map_err(|_| "the optimizer panicked".to_string())
}

#[test]
fn no_number_a_preset_file_admits_panics_and_every_refusal_names_its_key() {
    let mut tried = 0;
    let mut accepted = 0;
    for name in PRESETS {
        let mut printed = serde_json::to_value(Preset::builtin(name).unwrap()).unwrap();
        // The optional counts are numbers too when given.
        printed["train"]["train_images"] = Value::from(1000);
        printed["train"]["val_images"] = Value::from(1000);
        let mut paths = Vec::new();
        numeric_paths(&printed, &mut Vec::new(), &mut paths);
        for path in &paths {
            for x in EXTREMES {
                let mut v = printed.clone();
                *slot(&mut v, path) = number(x);
                let text = serde_json::to_string_pretty(&v).unwrap();
                tried += 1;
                let outcome = parse(&text).and_then(|p| p.validate().map(|()| p));
                let keys: Vec<&String> = path
                    .iter()
                    .filter(|k| k.parse::<usize>().is_err())
                    .collect();
                match outcome {
                    Err(e) => assert!(
                        keys.iter().any(|k| e.contains(k.as_str())),
                        "{name}: {path:?} = {x}: the refusal names none of {keys:?}: {e}"
                    ),
                    Ok(p) => {
                        accepted += 1;
                        if let Err(e) = takes_a_step(&p) {
                            panic!("{name}: {path:?} = {x} is admitted, and then {e}");
                        }
                    }
                }
            }
        }
    }
    assert!(
        tried > 800 && accepted > 100,
        "{tried} tried, {accepted} accepted"
    );
}

#[test]
fn a_preset_of_the_wrong_shape_names_the_key_and_its_form() {
    let mut v = serde_json::to_value(Preset::builtin("cifar10").unwrap()).unwrap();
    v["batch_size"] = serde_json::json!([16, 32, 64]);
    let text = serde_json::to_string_pretty(&v).unwrap();
    let e = parse(&text).unwrap_err();
    assert!(e.contains("at `batch_size`"), "{e}");
    assert!(e.contains("expected a [min, max] pair of integers"), "{e}");
    v["batch_size"] = serde_json::json!([16, 32]);
    v["train"]["momentum"] = serde_json::json!("high");
    let e = parse(&serde_json::to_string(&v).unwrap()).unwrap_err();
    assert!(
        e.contains("at `train.momentum`") && e.contains("expected f64"),
        "{e}"
    );
}

#[test]
fn regression_a_weight_decay_of_1e308_is_refused_by_name() {
    let mut v = serde_json::to_value(Preset::builtin("fashion-mnist").unwrap()).unwrap();
    v["train"]["weight_decay"] = Value::from(1e308);
    let p = parse(&serde_json::to_string(&v).unwrap()).unwrap();
    let e = p.validate().unwrap_err();
    assert!(e.contains("train.weight_decay must be from 0 to 1"), "{e}");
}
