//! The validity rules `aiperf-rules-6` (docs/design.md §5) as data: a table of keys of the run's
//! evidence — the recorded configuration, the dataset identity read from the pack headers,
//! the search and HPO algorithms the run used, and the measured duration and error — each
//! with its required value or range and the status a deviation gives. The verdict walks
//! the table, so the next rules version is a diff of [`RULES`]. Also the shared record
//! types the runtime writes and the scorer reads back ([`DatasetIdentity`],
//! [`SearchRecord`]).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// What a deviation from a rule makes of a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Not a result at all.
    Invalid,
    /// Measured correctly, but not under the official configuration.
    Unofficial,
}

/// What a key must hold.
#[derive(Clone, Copy, Debug)]
pub enum Requirement {
    /// Exactly this JSON value (given as JSON text).
    Equals(&'static str),
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A number ≥ this.
    AtLeast(f64),
    /// A number ≤ this.
    AtMost(f64),
}

/// One rule: the key (a JSON pointer into the evidence), its requirement, the status a
/// deviation gives, and what the key is in words (with the flag that sets it, if any).
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// JSON pointer into the evidence document ([`evidence`]).
    pub key: &'static str,
    /// The required value or range.
    pub required: Requirement,
    /// What breaking it makes of the result.
    pub severity: Severity,
    /// The key in words, and how it is set.
    pub what: &'static str,
}

use Requirement::{AtLeast, AtMost, Equals, OneOf};
use Severity::{Invalid, Unofficial};

/// The rules of `aiperf-rules-6` read from the configuration and measured figures, in the
/// order the verdict reports deviations (the checks of the records against themselves are
/// [`crate::consistency`]).
#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    Rule { key: "/config/trainer", required: Equals("\"real\""), severity: Invalid, what: "trainer (--trainer)" },
    Rule { key: "/config/preset/train/precision", required: OneOf(&["fp16", "bf16", "tf32", "fp32"]), severity: Invalid, what: "precision, FP16 or wider (--precision)" },
    Rule { key: "/measured/duration_s", required: AtLeast(3600.0), severity: Invalid, what: "run length in seconds, at least 1 h (--duration)" },
    Rule { key: "/measured/final_error", required: AtMost(0.30), severity: Invalid, what: "final error, 1 − best validation accuracy" },
    Rule { key: "/dataset/name", required: Equals("\"imagenet\""), severity: Unofficial, what: "dataset (--config, --data)" },
    Rule { key: "/dataset/train_images", required: Equals("1281167"), severity: Unofficial, what: "training images in the pack (--data)" },
    Rule { key: "/dataset/val_images", required: Equals("50000"), severity: Unofficial, what: "validation images in the pack (--data)" },
    Rule { key: "/dataset/classes", required: Equals("1000"), severity: Unofficial, what: "classes in the pack (--data)" },
    Rule { key: "/dataset/input", required: Equals("[224,224,3]"), severity: Unofficial, what: "model input H×W×C (--config)" },
    Rule { key: "/dataset/subset", required: Equals("false"), severity: Unofficial, what: "pack made from a subset (aiperf-data-prep --limit-per-class)" },
    Rule { key: "/config/preset/train/train_images", required: Equals("null"), severity: Unofficial, what: "training images per epoch, the whole split (--train-images)" },
    Rule { key: "/config/preset/train/val_images", required: Equals("null"), severity: Unofficial, what: "validation images per epoch, the whole split (--val-images)" },
    Rule { key: "/config/preset/start", required: Equals("\"resnet50\""), severity: Unofficial, what: "start architecture (--start)" },
    Rule { key: "/config/preset/epochs", required: Equals("60"), severity: Unofficial, what: "epoch budget (--epochs)" },
    Rule { key: "/search/warmup_epochs", required: Equals("[15,30,45]"), severity: Unofficial, what: "warm-up rounds' epoch budgets (--epochs)" },
    Rule { key: "/search/patience", required: Equals("[8,10,12,14,16,18,20,20]"), severity: Unofficial, what: "patience of rounds 1–8, min(6 + 2·round, 20) (preset patience_scale)" },
    Rule { key: "/config/preset/kernel_sizes", required: Equals("[3,5,7]"), severity: Unofficial, what: "kernel sizes searched (preset kernel_sizes)" },
    Rule { key: "/search/tpe_from_round", required: Equals("4"), severity: Unofficial, what: "first round TPE suggests" },
    Rule { key: "/search/architecture_search", required: Equals(r#"{"name":"network-morphism-bo","version":3}"#), severity: Unofficial, what: "architecture search algorithm" },
    Rule { key: "/search/hpo", required: Equals(r#"{"name":"tpe","version":2}"#), severity: Unofficial, what: "hyperparameter search algorithm" },
];

/// The dataset a run trained on, from its packs' headers (`aiperf-data-prep` writes them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetIdentity {
    /// The dataset's name in the pack (`imagenet`, `fashion-mnist`, …; `synthetic` for the
    /// simulated trainer).
    pub name: String,
    /// Images in the training split.
    pub train_images: u64,
    /// Images in the validation split.
    pub val_images: u64,
    /// Classes.
    pub classes: u32,
    /// Stored image size `[C, H, W]` (before augmentation).
    pub stored: [u32; 3],
    /// The model's input `[H, W, C]` (after the training augmentation's crop).
    pub input: [u32; 3],
    /// Whether `aiperf-data-prep` kept only part of the source (`None`: a pack written
    /// before the flag was recorded, or no pack at all).
    pub subset: Option<bool>,
    /// CRC-32 of the training and validation packs' contents (`None` without packs).
    pub crc32: Option<[u32; 2]>,
}

/// A named, versioned algorithm.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgorithmId {
    /// Its name.
    pub name: String,
    /// Its version: changed whenever its behaviour changes.
    pub version: u32,
}

/// The search as the run carried it out, computed by the runtime from the functions it ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchRecord {
    /// Architecture search.
    pub architecture_search: AlgorithmId,
    /// Hyperparameter search.
    pub hpo: AlgorithmId,
    /// Epoch budgets of warm-up rounds 1–3.
    pub warmup_epochs: Vec<u32>,
    /// Patience of rounds 1–8.
    pub patience: Vec<u32>,
    /// The first round (from 1) whose hyperparameters TPE suggests.
    pub tpe_from_round: u32,
}

/// The document the rules are checked against: `config` (the recorded configuration),
/// `dataset` ([`DatasetIdentity`]), `search` ([`SearchRecord`]) and `measured`.
pub fn evidence(
    config: &Value,
    dataset: &Value,
    search: &Value,
    duration_s: f64,
    final_error: f64,
) -> Value {
    json!({
        "config": config,
        "dataset": dataset,
        "search": search,
        "measured": { "duration_s": duration_s, "final_error": final_error },
    })
}

/// One rule broken: the rule and what the evidence holds (`None`: the key is absent).
#[derive(Clone, Debug)]
pub struct Deviation {
    /// The rule.
    pub rule: &'static Rule,
    /// The recorded value.
    pub found: Option<Value>,
}

impl std::fmt::Display for Deviation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let found = match &self.found {
            Some(v) => v.to_string(),
            None => "not recorded".into(),
        };
        let required = match self.rule.required {
            Equals("null") => "official: not set (the whole split)".into(),
            Equals(v) => format!("official {v}"),
            OneOf(v) => format!("allowed {}", v.join(", ")),
            AtLeast(v) => format!("at least {v}"),
            AtMost(v) => format!("at most {v}"),
        };
        write!(
            f,
            "{}: {found}, {required} [{}]",
            self.rule.what, self.rule.key
        )
    }
}

/// Whether `found` meets `required`.
fn meets(required: Requirement, found: &Value) -> bool {
    match required {
        Equals(text) => serde_json::from_str::<Value>(text).is_ok_and(|v| numeric_eq(&v, found)),
        OneOf(allowed) => found.as_str().is_some_and(|s| allowed.contains(&s)),
        AtLeast(lo) => found.as_f64().is_some_and(|v| v >= lo),
        AtMost(hi) => found.as_f64().is_some_and(|v| v <= hi),
    }
}

/// JSON equality that takes 60 and 60.0 as the same number.
fn numeric_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| numeric_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| numeric_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Every rule of [`RULES`] the evidence breaks, in table order.
pub fn check(evidence: &Value) -> Vec<Deviation> {
    RULES
        .iter()
        .filter_map(|rule| {
            let found = evidence.pointer(rule.key);
            let ok = found.is_some_and(|v| meets(rule.required, v));
            (!ok).then(|| Deviation {
                rule,
                found: found.cloned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
