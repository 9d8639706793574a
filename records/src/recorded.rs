//! The recorded configuration as every reader of a run checks it: `aiperf score`,
//! `aiperf-score`, `aiperf audit` and `aiperf run --resume` read the `config` attribute
//! through [`crate::read_config`] or [`crate::read_run`], which refuse a setting whose value
//! this aiperf does not know, one way for all of them. The values are those `aiperf run`
//! records; the `aiperf` crate's tests hold this table to its own types.

/// Each enumerated setting: its name in messages, its JSON pointer in the recorded
/// configuration, and every value it may hold.
pub const SETTINGS: &[(&str, &str, &[&str])] = &[
    ("trainer", "/trainer", &["real", "simulated", "emulated"]),
    (
        "precision",
        "/preset/train/precision",
        &["auto", "fp32", "fp16", "bf16"],
    ),
    (
        "train.memory_format",
        "/preset/train/memory_format",
        &["auto", "nchw", "channels-last"],
    ),
    (
        "train.exchange.method",
        "/preset/train/exchange/method",
        &["auto", "allreduce", "hierarchical"],
    ),
    (
        "train.exchange.staging",
        "/preset/train/exchange/staging",
        &["auto", "host", "device"],
    ),
    (
        "train.augment_on",
        "/preset/train/augment_on",
        &["auto", "cpu", "device"],
    ),
];

/// `Err` naming the first setting of `config` (JSON) that holds a value outside
/// [`SETTINGS`]; a setting absent (records of an older schema) is fine.
pub fn check(config: &serde_json::Value) -> Result<(), String> {
    for (name, pointer, values) in SETTINGS {
        let Some(v) = config.pointer(pointer) else {
            continue;
        };
        if !v.as_str().is_some_and(|s| values.contains(&s)) {
            return Err(format!(
                "{name} is {v}, which this aiperf does not know (it knows {}): the records were written by another aiperf release, or altered",
                values.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_or_mistyped_value_is_named_and_an_absent_one_is_fine() {
        let ok =
            serde_json::json!({"trainer": "real", "preset": {"train": {"memory_format": "nchw"}}});
        assert_eq!(check(&ok), Ok(()));
        let bad = serde_json::json!({"preset": {"train": {"memory_format": "weird"}}});
        let e = check(&bad).unwrap_err();
        assert!(e.starts_with("train.memory_format is \"weird\", which this aiperf does not know (it knows auto, nchw, channels-last)"), "{e}");
        let typed = serde_json::json!({"trainer": 3});
        assert!(check(&typed).unwrap_err().starts_with("trainer is 3,"));
    }
}
