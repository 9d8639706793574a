//! One test per rule: an official evidence document passes; changing one key breaks
//! exactly that rule, with its severity; a key that is absent breaks its rule too.

use serde_json::{json, Value};

use super::*;

/// An official run's evidence, written out by hand (not derived from the table).
fn official() -> Value {
    json!({
        "config": {
            "trainer": "real",
            "preset": {
                "name": "imagenet", "start": "resnet50", "epochs": 60,
                "kernel_sizes": [3, 5, 7],
                "train": { "precision": "fp32", "train_images": null, "val_images": null }
            }
        },
        "dataset": {
            "name": "imagenet", "train_images": 1281167, "val_images": 50000, "classes": 1000,
            "stored": [3, 256, 256], "input": [224, 224, 3], "subset": false,
            "crc32": [1, 2]
        },
        "search": {
            "architecture_search": { "name": "network-morphism-bo", "version": 3 },
            "hpo": { "name": "tpe", "version": 2 },
            "warmup_epochs": [15, 30, 45],
            "patience": [8, 10, 12, 14, 16, 18, 20, 20],
            "tpe_from_round": 4
        },
        "measured": { "duration_s": 3600.0, "final_error": 0.3 }
    })
}

/// (key, a value breaking it, the severity expected).
fn cases() -> Vec<(&'static str, Value, Severity)> {
    use Severity::*;
    vec![
        ("/config/trainer", json!("simulated"), Invalid),
        ("/config/preset/train/precision", json!("fp8"), Invalid),
        ("/measured/duration_s", json!(3599.9), Invalid),
        ("/measured/final_error", json!(0.3001), Invalid),
        ("/dataset/name", json!("cifar10"), Unofficial),
        ("/dataset/train_images", json!(1281166), Unofficial),
        ("/dataset/val_images", json!(50), Unofficial),
        ("/dataset/classes", json!(100), Unofficial),
        ("/dataset/input", json!([256, 256, 3]), Unofficial),
        ("/dataset/subset", json!(true), Unofficial),
        (
            "/config/preset/train/train_images",
            json!(100000),
            Unofficial,
        ),
        ("/config/preset/train/val_images", json!(50), Unofficial),
        ("/config/preset/start", json!("resnet18"), Unofficial),
        ("/config/preset/epochs", json!(1), Unofficial),
        ("/search/warmup_epochs", json!([1, 1, 1]), Unofficial),
        (
            "/search/patience",
            json!([2, 3, 3, 4, 4, 4, 5, 5]),
            Unofficial,
        ),
        ("/config/preset/kernel_sizes", json!([3]), Unofficial),
        ("/search/tpe_from_round", json!(1), Unofficial),
        (
            "/search/architecture_search",
            json!({"name": "random", "version": 1}),
            Unofficial,
        ),
        (
            "/search/hpo",
            json!({"name": "tpe", "version": 1}),
            Unofficial,
        ),
    ]
}

fn set(doc: &mut Value, key: &str, v: Value) {
    *doc.pointer_mut(key)
        .unwrap_or_else(|| panic!("{key} in the document")) = v;
}

#[test]
fn the_official_evidence_breaks_no_rule() {
    let d = check(&official());
    assert!(
        d.is_empty(),
        "{:?}",
        d.iter().map(|d| d.to_string()).collect::<Vec<_>>()
    );
}

#[test]
fn each_rule_broken_alone_is_named_with_its_severity() {
    for (key, bad, severity) in cases() {
        let mut doc = official();
        set(&mut doc, key, bad.clone());
        let d = check(&doc);
        assert_eq!(d.len(), 1, "{key} = {bad}: {d:?}");
        assert_eq!(d[0].rule.key, key);
        assert_eq!(d[0].rule.severity, severity, "{key}");
        let text = d[0].to_string();
        assert!(
            text.contains(&bad.to_string()) && text.contains(key),
            "{text}"
        );
    }
}

#[test]
fn every_rule_of_the_table_has_a_case() {
    let tested: Vec<&str> = cases().iter().map(|c| c.0).collect();
    for rule in RULES {
        assert!(tested.contains(&rule.key), "no test breaks {}", rule.key);
    }
    assert_eq!(tested.len(), RULES.len());
}

#[test]
fn an_absent_key_breaks_its_rule_as_not_recorded() {
    let mut doc = official();
    doc["dataset"].as_object_mut().unwrap().remove("subset");
    let d = check(&doc);
    assert_eq!(d.len(), 1);
    assert!(d[0].found.is_none());
    assert!(d[0].to_string().contains("not recorded"), "{}", d[0]);
    // A pack written before the subset flag: null, not false.
    let mut old = official();
    set(&mut old, "/dataset/subset", Value::Null);
    assert_eq!(check(&old)[0].rule.key, "/dataset/subset");
}

#[test]
fn numbers_compare_by_value_and_bounds_are_inclusive() {
    let mut doc = official();
    set(&mut doc, "/config/preset/epochs", json!(60.0));
    set(&mut doc, "/measured/duration_s", json!(3600));
    set(&mut doc, "/search/warmup_epochs", json!([15.0, 30, 45]));
    assert!(check(&doc).is_empty());
    set(&mut doc, "/measured/duration_s", json!("an hour"));
    assert_eq!(check(&doc)[0].rule.key, "/measured/duration_s");
}

#[test]
fn the_shared_record_types_round_trip_and_refuse_unknown_keys() {
    let id = DatasetIdentity {
        name: "imagenet".into(),
        train_images: 1_281_167,
        val_images: 50_000,
        classes: 1000,
        stored: [3, 256, 256],
        input: [224, 224, 3],
        subset: Some(false),
        crc32: Some([7, 9]),
    };
    let text = serde_json::to_string(&id).unwrap();
    assert_eq!(serde_json::from_str::<DatasetIdentity>(&text).unwrap(), id);
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["extra"] = json!(1);
    assert!(serde_json::from_value::<DatasetIdentity>(v).is_err());
}
