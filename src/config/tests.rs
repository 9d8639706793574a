use super::*;
use crate::exchange::{ExchangeArgs, Staging};

fn flags() -> RunFlags {
    RunFlags::default()
}

fn fresh_err(f: RunFlags) -> String {
    RecordedConfig::fresh(&f).unwrap_err().to_string()
}

#[test]
fn regression_duration_1e20_is_an_error_naming_the_flag() {
    let e = fresh_err(RunFlags {
        duration: Some(1e20),
        ..flags()
    });
    assert!(e.contains("--duration"), "{e}");
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = fresh_err(RunFlags {
            duration: Some(bad),
            ..flags()
        });
        assert!(e.contains("--duration"), "{bad}: {e}");
    }
}

#[test]
fn regression_threads_0_is_an_error_naming_the_flag() {
    for (f, name) in [
        (
            RunFlags {
                threads: Some(0),
                ..flags()
            },
            "--threads",
        ),
        (
            RunFlags {
                search_threads: Some(0),
                ..flags()
            },
            "--search-threads",
        ),
        (
            RunFlags {
                group_size: Some(0),
                ..flags()
            },
            "--group-size",
        ),
    ] {
        let e = fresh_err(f);
        assert!(e.contains(name), "{e}");
    }
}

#[test]
fn regression_interval_flags_zero_or_infinite_are_errors() {
    for v in [0.0, f64::INFINITY, f64::NAN, -5.0] {
        for (f, name) in [
            (
                RunFlags {
                    status_interval: Some(v),
                    ..flags()
                },
                "--status-interval",
            ),
            (
                RunFlags {
                    monitor_interval: Some(v),
                    ..flags()
                },
                "--monitor-interval",
            ),
            (
                RunFlags {
                    stall_timeout: Some(v),
                    ..flags()
                },
                "--stall-timeout",
            ),
        ] {
            let e = fresh_err(f);
            assert!(e.contains(name), "{v}: {e}");
        }
    }
}

#[test]
fn every_numeric_flag_is_range_checked() {
    let cases = [
        (
            RunFlags {
                epochs: Some(0),
                ..flags()
            },
            "--epochs",
        ),
        (
            RunFlags {
                train_images: Some(0),
                ..flags()
            },
            "--train-images",
        ),
        (
            RunFlags {
                val_images: Some(0),
                ..flags()
            },
            "--val-images",
        ),
        (
            RunFlags {
                batch_size: Some("0".into()),
                ..flags()
            },
            "--batch-size",
        ),
        (
            RunFlags {
                batch_size: Some("64:8".into()),
                ..flags()
            },
            "--batch-size",
        ),
        (
            RunFlags {
                batch_size: Some("x".into()),
                ..flags()
            },
            "--batch-size",
        ),
        (
            RunFlags {
                sim_ops: Some(0.0),
                ..flags()
            },
            "--sim-ops",
        ),
        (
            RunFlags {
                speedup: Some(f64::INFINITY),
                ..flags()
            },
            "--speedup",
        ),
        (
            RunFlags {
                sim_train_images: Some(0),
                ..flags()
            },
            "--sim-train-images",
        ),
        (
            RunFlags {
                classes: Some(0),
                ..flags()
            },
            "--classes",
        ),
        (
            RunFlags {
                score_interval: Some(1e-300),
                ..flags()
            },
            "--score-interval",
        ),
    ];
    for (f, name) in cases {
        let e = fresh_err(f);
        assert!(e.contains(name), "{name}: {e}");
    }
}

#[test]
fn a_fixed_batch_size_is_one_size_range() {
    let c = RecordedConfig::fresh(&RunFlags {
        batch_size: Some("32".into()),
        ..flags()
    })
    .unwrap();
    assert_eq!(c.preset.batch_size, (32, 32));
}

#[test]
fn the_recorded_configuration_round_trips_through_json() {
    let mut c = RecordedConfig::fresh(&RunFlags {
        trainer: Some(TrainerKind::Simulated),
        seed: Some(7),
        ..flags()
    })
    .unwrap();
    c.clock_offsets_s = vec![0.0, 1e-6];
    c.clock_uncertainty_s = vec![0.0, 2e-6];
    let back = RecordedConfig::resumed(&flags(), Path::new("r"), &c.to_json()).unwrap();
    assert_eq!(back, c);
}

#[test]
fn regression_resume_refuses_flags_its_records_fix() {
    let c = RecordedConfig::fresh(&flags()).unwrap();
    for (f, name) in [
        (
            RunFlags {
                duration: Some(10.0),
                ..flags()
            },
            "--duration",
        ),
        (
            RunFlags {
                epochs: Some(3),
                ..flags()
            },
            "--epochs",
        ),
        (
            RunFlags {
                batch_size: Some("8".into()),
                ..flags()
            },
            "--batch-size",
        ),
        (
            RunFlags {
                config: Some("cifar10".into()),
                ..flags()
            },
            "--config",
        ),
        (
            RunFlags {
                seed: Some(1),
                ..flags()
            },
            "--seed",
        ),
    ] {
        let e = RecordedConfig::resumed(&f, Path::new("runs/a"), &c.to_json())
            .unwrap_err()
            .to_string();
        assert!(e.contains(name) && e.contains("runs/a"), "{e}");
    }
}

#[test]
fn regression_resume_validates_the_interval_flags_like_a_fresh_run() {
    let c = RecordedConfig::fresh(&flags()).unwrap();
    for (f, name) in [
        (
            RunFlags {
                status_interval: Some(0.0),
                ..flags()
            },
            "--status-interval",
        ),
        (
            RunFlags {
                monitor_interval: Some(0.0),
                ..flags()
            },
            "--monitor-interval",
        ),
        (
            RunFlags {
                stall_timeout: Some(0.0),
                ..flags()
            },
            "--stall-timeout",
        ),
        (
            RunFlags {
                threads: Some(0),
                ..flags()
            },
            "--threads",
        ),
    ] {
        let e = RecordedConfig::resumed(&f, Path::new("r"), &c.to_json())
            .unwrap_err()
            .to_string();
        assert!(e.contains(name), "{e}");
    }
    let ok = RecordedConfig::resumed(
        &RunFlags {
            status_interval: Some(5.0),
            threads: Some(2),
            ..flags()
        },
        Path::new("r"),
        &c.to_json(),
    )
    .unwrap();
    assert_eq!((ok.intervals.status_s, ok.threads), (5.0, Some(2)));
}

#[test]
fn regression_unknown_key_inside_train_of_a_preset_file_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("p.json");
    let mut v = serde_json::to_value(Preset::builtin("fashion-mnist").unwrap()).unwrap();
    v["train"]["lr_per_265"] = serde_json::json!(0.1);
    std::fs::write(&path, v.to_string()).unwrap();
    let e = Preset::load(path.to_str().unwrap()).unwrap_err();
    assert!(e.contains("lr_per_265") && e.contains("p.json"), "{e}");
}

#[test]
fn a_preset_with_an_absurd_augmentation_is_refused_before_the_run() {
    let mut p = Preset::builtin("fashion-mnist").unwrap();
    p.train.augment = crate::data::Augment::CropFlip { pad: 100_000 };
    assert!(p.validate().unwrap_err().contains("train.augment"));
}

/// Seeded corruption of preset JSON files: every outcome is a clean `Err` or a preset that
/// validates; never a panic.
#[test]
fn corruption_sweep_preset_json_never_panics() {
    use rand::{Rng, SeedableRng};
    let text = serde_json::to_string_pretty(&Preset::builtin("imagenet").unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("p.json");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let mut ok = 0;
    for case in 0..1200 {
        let mut bytes = text.clone().into_bytes();
        match case % 4 {
            0 => bytes.truncate(rng.random_range(0..bytes.len())),
            1 => {
                for _ in 0..rng.random_range(1..4) {
                    let i = rng.random_range(0..bytes.len());
                    bytes[i] ^= 1 << rng.random_range(0..8);
                }
            }
            2 => {
                // A huge or odd number where a digit was.
                let digits: Vec<usize> = (0..bytes.len())
                    .filter(|&i| bytes[i].is_ascii_digit())
                    .collect();
                let i = digits[rng.random_range(0..digits.len())];
                let huge = ["1e400", "-1", "18446744073709551616", "0", "1e-320", "NaN"];
                let with = huge[rng.random_range(0..huge.len())];
                bytes.splice(i..=i, with.bytes());
            }
            _ => {
                let i = rng.random_range(0..bytes.len());
                bytes.insert(i, b"{}[],:\"0"[rng.random_range(0..8)]);
            }
        }
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(p) = Preset::load(path.to_str().unwrap()) {
            p.validate().unwrap();
            ok += 1;
        }
    }
    assert!(ok < 1200, "some mutations must be refused");
}

#[test]
fn exchange_flags_are_range_checked_and_emulated_ops_needs_the_emulated_trainer() {
    let e = fresh_err(RunFlags {
        exchange: ExchangeArgs {
            bucket_bytes: Some(0),
            ..Default::default()
        },
        ..flags()
    });
    assert!(e.contains("--bucket-bytes"), "{e}");
    let e = fresh_err(RunFlags {
        emulated_ops: Some(1e12),
        ..flags()
    });
    assert!(
        e.contains("--emulated-ops") && e.contains("--trainer emulated"),
        "{e}"
    );
    let c = RecordedConfig::fresh(&RunFlags {
        trainer: Some(TrainerKind::Emulated),
        emulated_ops: Some(1e12),
        exchange: ExchangeArgs {
            bucket_bytes: Some(1 << 16),
            exchange: Some(crate::exchange::ExchangeMethod::Hierarchical),
            ..Default::default()
        },
        ..flags()
    })
    .unwrap();
    assert_eq!(c.sim.ops, 1e12);
    let x = c.preset.train.exchange;
    assert_eq!((x.bucket_bytes, x.first_bucket_bytes), (1 << 16, 1 << 16));
    // Recorded, and read back the same.
    let back: RecordedConfig = serde_json::from_str(&c.to_json()).unwrap();
    assert_eq!(back, c);
}

#[test]
fn data_and_staging_flags_are_recorded_and_range_checked() {
    for bad in [0, 257] {
        let e = fresh_err(RunFlags {
            loader_workers: Some(bad),
            ..flags()
        });
        assert!(
            e.contains("--loader-workers") && e.contains("1..=256"),
            "{e}"
        );
    }
    let c = RecordedConfig::fresh(&RunFlags {
        loader_workers: Some(6),
        augment_on: Some(crate::train::AugmentOn::Device),
        exchange: ExchangeArgs {
            exchange_staging: Some(Staging::Host),
            ..Default::default()
        },
        ..flags()
    })
    .unwrap();
    let t = &c.preset.train;
    assert_eq!(t.loader_workers, 6);
    assert_eq!(t.augment_on, crate::train::AugmentOn::Device);
    assert_eq!(t.exchange.staging, Staging::Host);
    let back: RecordedConfig = serde_json::from_str(&c.to_json()).unwrap();
    assert_eq!(back, c);
    // A configuration recorded before these settings existed reads as auto.
    let mut old: serde_json::Value = serde_json::from_str(&c.to_json()).unwrap();
    let train = old["preset"]["train"].as_object_mut().unwrap();
    train.remove("augment_on");
    train["exchange"].as_object_mut().unwrap().remove("staging");
    let old: RecordedConfig = serde_json::from_value(old).unwrap();
    assert_eq!(old.preset.train.augment_on, crate::train::AugmentOn::Auto);
    assert_eq!(old.preset.train.exchange.staging, Staging::Auto);
}

#[test]
fn auto_augmentation_follows_the_device() {
    use crate::data::Output;
    use crate::train::AugmentOn;
    use tch::Device;
    assert_eq!(AugmentOn::Auto.output(Device::Cpu), Output::Host);
    assert_eq!(AugmentOn::Auto.output(Device::Cuda(0)), Output::Device);
    assert_eq!(AugmentOn::Cpu.output(Device::Cuda(0)), Output::Pinned);
    assert_eq!(AugmentOn::Cpu.output(Device::Cpu), Output::Host);
    assert_eq!(AugmentOn::Device.output(Device::Cpu), Output::Device);
}

/// A preset file and the flags go through one validation: what the flags refuse, a preset
/// file refuses too, naming the field (the corpus's four cases first).
#[test]
fn regression_preset_files_are_refused_what_the_flags_refuse() {
    let tmp = tempfile::tempdir().unwrap();
    let base = serde_json::to_value(Preset::builtin("fashion-mnist").unwrap()).unwrap();
    let cases: [(&str, serde_json::Value, &str); 9] = [
        ("/train/exchange/bucket_bytes", 0.into(), "bucket_bytes"),
        (
            "/train/exchange/first_bucket_bytes",
            0.into(),
            "first_bucket_bytes",
        ),
        ("/train/trace_steps", 4_294_967_295u64.into(), "trace_steps"),
        ("/dataset", "bogus".into(), "dataset"),
        ("/start", "resnet7".into(), "start"),
        ("/train/loader_workers", 100_000.into(), "loader_workers"),
        ("/train/val_batch", 10_000_000.into(), "val_batch"),
        ("/duration_s", 1e-9.into(), "duration_s"),
        ("/score_interval_s", 1e-9.into(), "score_interval_s"),
    ];
    for (pointer, value, field) in cases {
        let mut p = base.clone();
        *p.pointer_mut(pointer).unwrap() = value.clone();
        let path = tmp.path().join("p.json");
        std::fs::write(&path, p.to_string()).unwrap();
        let e = fresh_err(RunFlags {
            config: Some(path.to_str().unwrap().into()),
            ..flags()
        });
        assert!(
            e.contains("p.json") && e.contains(field),
            "{pointer} = {value}: {e}"
        );
    }
    // The same limits, through the flags, name the flag.
    let flag_cases = [
        (
            RunFlags {
                exchange: ExchangeArgs {
                    bucket_bytes: Some(0),
                    ..Default::default()
                },
                ..flags()
            },
            "--bucket-bytes",
        ),
        (
            RunFlags {
                trace_steps: Some(u32::MAX),
                ..flags()
            },
            "--trace-steps",
        ),
        (
            RunFlags {
                start: Some("resnet7".into()),
                ..flags()
            },
            "--start",
        ),
        (
            RunFlags {
                duration: Some(1e-9),
                ..flags()
            },
            "--duration",
        ),
    ];
    for (f, flag) in flag_cases {
        let e = fresh_err(f);
        assert!(e.starts_with(flag), "{flag}: {e}");
    }
    // The largest values both ways accept are accepted by both.
    let mut p = base.clone();
    p["train"]["trace_steps"] = MAX_TRACE_STEPS.into();
    p["train"]["exchange"]["bucket_bytes"] = BUCKET_BYTES.1.into();
    let path = tmp.path().join("max.json");
    std::fs::write(&path, p.to_string()).unwrap();
    let f = RunFlags {
        config: Some(path.to_str().unwrap().into()),
        trace_steps: Some(MAX_TRACE_STEPS),
        exchange: ExchangeArgs {
            bucket_bytes: Some(BUCKET_BYTES.1),
            ..Default::default()
        },
        ..flags()
    };
    RecordedConfig::fresh(&f).unwrap();
}
