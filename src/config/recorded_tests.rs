//! The scorer's table of recorded values ([`aiperf_records::recorded::SETTINGS`]) is exactly
//! what this crate's types record, so score, audit and resume refuse the same values.

use clap::ValueEnum;

use super::TrainerKind;
use crate::exchange::{ExchangeMethod, Staging};
use crate::train::{AugmentOn, MemoryFormat, Precision};

/// The JSON names of every variant of `E`, as `aiperf run` records them.
fn recorded<E: ValueEnum + serde::Serialize>() -> Vec<String> {
    E::value_variants()
        .iter()
        .map(|v| {
            serde_json::to_value(v)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn the_scorers_table_holds_every_value_and_only_the_values_aiperf_records() {
    let ours = [
        ("trainer", recorded::<TrainerKind>()),
        ("precision", recorded::<Precision>()),
        ("train.memory_format", recorded::<MemoryFormat>()),
        ("train.exchange.method", recorded::<ExchangeMethod>()),
        ("train.exchange.staging", recorded::<Staging>()),
        ("train.augment_on", recorded::<AugmentOn>()),
    ];
    let table = aiperf_records::recorded::SETTINGS;
    assert_eq!(table.len(), ours.len());
    for ((name, values), (t_name, _, t_values)) in ours.iter().zip(table) {
        assert_eq!(name, t_name);
        let mut a: Vec<&str> = values.iter().map(String::as_str).collect();
        let mut b = t_values.to_vec();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "{name}");
    }
}

#[test]
fn each_settings_pointer_finds_it_in_a_recorded_configuration() {
    let config = super::RecordedConfig::fresh(&super::flags::RunFlags::default()).unwrap();
    let json = serde_json::to_value(&config).unwrap();
    for (name, pointer, _) in aiperf_records::recorded::SETTINGS {
        assert!(json.pointer(pointer).is_some(), "{name} at {pointer}");
    }
    assert_eq!(aiperf_records::recorded::check(&json), Ok(()));
}
