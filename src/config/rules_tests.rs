//! `--config imagenet` against the rules `aiperf-rules-6`: as configured it breaks none of
//! the configuration rules; each override of an official key makes the result UNOFFICIAL
//! (or INVALID) naming that key and its flag; operational overrides keep it official.

use aiperf_records::rules::{self, DatasetIdentity, Severity};

use super::*;
use crate::roles::dispatch::search_record;

/// The whole ImageNet, as the official packs' headers give it.
fn imagenet() -> DatasetIdentity {
    DatasetIdentity {
        name: "imagenet".into(),
        train_images: 1_281_167,
        val_images: 50_000,
        classes: 1000,
        stored: [3, 256, 256],
        input: [224, 224, 3],
        subset: Some(false),
        crc32: Some([1, 2]),
    }
}

/// The deviations of a run configured by `f` on `dataset`, run 2 h to a 25 % error.
fn deviations(f: RunFlags, dataset: &DatasetIdentity) -> Vec<(String, Severity, String)> {
    let c = RecordedConfig::fresh(&RunFlags {
        config: Some("imagenet".into()),
        ..f
    })
    .expect("a valid configuration");
    // As `aiperf run` records it: `auto` resolved at start-up (here as a GPU node does).
    let mut c = c;
    let t = &mut c.preset.train;
    if t.precision == crate::train::Precision::Auto {
        t.precision = crate::train::Precision::Bf16;
    }
    let config: serde_json::Value = serde_json::from_str(&c.to_json()).unwrap();
    let evidence = rules::evidence(
        &config,
        &serde_json::to_value(dataset).unwrap(),
        &serde_json::to_value(search_record(&c.preset)).unwrap(),
        7200.0,
        0.25,
    );
    rules::check(&evidence)
        .into_iter()
        .map(|d| (d.rule.key.to_string(), d.rule.severity, d.to_string()))
        .collect()
}

#[test]
fn the_imagenet_preset_breaks_no_rule() {
    let d = deviations(RunFlags::default(), &imagenet());
    assert!(d.is_empty(), "{d:?}");
}

#[test]
fn each_override_of_an_official_key_is_named() {
    let d = RunFlags::default;
    let cases: Vec<(RunFlags, &str, &str, Severity)> = vec![
        (
            RunFlags {
                epochs: Some(1),
                ..d()
            },
            "/config/preset/epochs",
            "--epochs",
            Severity::Unofficial,
        ),
        (
            RunFlags {
                val_images: Some(50),
                ..d()
            },
            "/config/preset/train/val_images",
            "--val-images",
            Severity::Unofficial,
        ),
        (
            RunFlags {
                train_images: Some(1000),
                ..d()
            },
            "/config/preset/train/train_images",
            "--train-images",
            Severity::Unofficial,
        ),
        (
            RunFlags {
                start: Some("resnet18".into()),
                ..d()
            },
            "/config/preset/start",
            "--start",
            Severity::Unofficial,
        ),
        (
            RunFlags {
                trainer: Some(TrainerKind::Simulated),
                ..d()
            },
            "/config/trainer",
            "--trainer",
            Severity::Invalid,
        ),
    ];
    for (f, key, flag, severity) in cases {
        let found = deviations(f, &imagenet());
        let hit = found.iter().find(|(k, _, _)| k == key);
        let (_, s, text) = hit.unwrap_or_else(|| panic!("{flag}: {key} not named in {found:?}"));
        assert_eq!(*s, severity, "{text}");
        assert!(text.contains(flag), "{text}");
    }
    // --epochs also changes the warm-up budgets the search ran.
    let keys: Vec<String> = deviations(
        RunFlags {
            epochs: Some(1),
            ..d()
        },
        &imagenet(),
    )
    .into_iter()
    .map(|x| x.0)
    .collect();
    assert_eq!(keys, ["/config/preset/epochs", "/search/warmup_epochs"]);
}

#[test]
fn a_subset_or_another_dataset_is_unofficial_and_operational_flags_are_not() {
    let subset = DatasetIdentity {
        train_images: 10_000,
        val_images: 1000,
        subset: Some(true),
        ..imagenet()
    };
    let keys: Vec<String> = deviations(RunFlags::default(), &subset)
        .into_iter()
        .map(|x| x.0)
        .collect();
    assert_eq!(
        keys,
        [
            "/dataset/train_images",
            "/dataset/val_images",
            "/dataset/subset"
        ]
    );
    let unrecorded = DatasetIdentity {
        subset: None,
        ..imagenet()
    };
    assert_eq!(deviations(RunFlags::default(), &unrecorded).len(), 1);
    let operational = RunFlags {
        duration: Some(3600.0),
        seed: Some(9),
        threads: Some(2),
        group_size: Some(4),
        search_threads: Some(1),
        status_interval: Some(5.0),
        batch_size: Some("64:128".into()),
        ..RunFlags::default()
    };
    let d = deviations(operational, &imagenet());
    assert!(d.is_empty(), "{d:?}");
}
