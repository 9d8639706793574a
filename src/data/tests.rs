//! Loader tests on small packs written here: partitioning, determinism, augmentation
//! consistency across group sizes, and configuration errors.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use aiperf_data_prep::{Pack, PackWriter, Source};

use super::*;

/// A pack of `n` C×H×W images whose pixels encode the sample index; label = index mod k.
fn make_pack(dir: &Path, n: usize, [c, h, w]: [u32; 3], k: u32) -> Arc<Pack> {
    let path = dir.join("train.aipk");
    let mut wr = PackWriter::create(&path, "train", [c, h, w], k).unwrap();
    let per = (c * h * w) as usize;
    for i in 0..n {
        let img: Vec<u8> = (0..per).map(|p| ((i * 31 + p * 7) % 256) as u8).collect();
        wr.push(&img, (i % k as usize) as u32, &path).unwrap();
    }
    let names = (0..k).map(|i| format!("c{i}")).collect();
    let src = Source {
        kind: "test".into(),
        dataset: "test".into(),
        inputs: vec![],
        processing: String::new(),
        subset: Some(false),
    };
    wr.finish(names, src, 0).unwrap();
    Arc::new(Pack::open(&path).unwrap())
}

fn cfg(batch: usize, rank: usize, group: usize) -> LoaderConfig {
    LoaderConfig {
        global_batch: batch,
        rank,
        group_size: group,
        seed: 42,
        workers: 2,
        ..LoaderConfig::default()
    }
}

#[test]
fn shard_ranges_tile_without_gaps() {
    for n in 0..40 {
        for parts in 1..6 {
            let ranges: Vec<_> = (0..parts).map(|r| shard_range(n, parts, r)).collect();
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[parts - 1].end, n);
            for w in ranges.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            let sizes: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
            assert!(
                sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
                "{sizes:?}"
            );
        }
    }
}

#[test]
fn every_sample_exactly_once_per_epoch_across_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = make_pack(tmp.path(), 103, [1, 4, 4], 10);
    for group in 1..=4 {
        for batch in [group, 8, 10, 64, 200] {
            if batch < group {
                continue;
            }
            for epoch in 0..2 {
                let mut seen = vec![0u32; 103];
                let mut steps = BTreeSet::new();
                for rank in 0..group {
                    let loader = Loader::new(Arc::clone(&pack), cfg(batch, rank, group)).unwrap();
                    let batches: Vec<Batch> = loader.epoch(epoch).map(Result::unwrap).collect();
                    steps.insert(batches.len());
                    for b in &batches {
                        assert_eq!(b.len(), b.indices.len());
                        assert_eq!(b.labels.len(), b.len());
                        assert!(b.global_size <= batch);
                        for &i in &b.indices {
                            seen[i] += 1;
                        }
                    }
                }
                assert_eq!(
                    steps.len(),
                    1,
                    "all ranks take the same number of steps: {steps:?}"
                );
                assert!(
                    seen.iter().all(|&s| s == 1),
                    "group {group} batch {batch}: {seen:?}"
                );
            }
        }
    }
}

#[test]
fn drop_last_drops_only_the_partial_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = make_pack(tmp.path(), 50, [1, 2, 2], 5);
    let mut seen = BTreeSet::new();
    for rank in 0..3 {
        let loader = Loader::new(
            Arc::clone(&pack),
            LoaderConfig {
                drop_last: true,
                ..cfg(12, rank, 3)
            },
        )
        .unwrap();
        assert_eq!(loader.batches_per_epoch(), 4);
        assert_eq!(loader.samples_per_epoch(), 48);
        for b in loader.epoch(3).map(Result::unwrap) {
            assert_eq!((b.len(), b.global_size), (4, 12));
            for i in b.indices {
                assert!(seen.insert(i), "sample {i} twice");
            }
        }
    }
    assert_eq!(seen.len(), 48);
}

#[test]
fn a_limit_draws_a_fresh_subset_each_shuffled_epoch_and_a_fixed_one_otherwise() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = make_pack(tmp.path(), 60, [1, 2, 2], 5);
    let subset = |shuffle: bool, epoch: u64| -> BTreeSet<usize> {
        let loader = Loader::new(
            Arc::clone(&pack),
            LoaderConfig {
                limit: Some(25),
                shuffle,
                ..cfg(10, 0, 1)
            },
        )
        .unwrap();
        assert_eq!(loader.batches_per_epoch(), 3);
        assert_eq!(loader.samples_per_epoch(), 25);
        let all: Vec<usize> = loader
            .epoch(epoch)
            .flat_map(|b| b.unwrap().indices)
            .collect();
        assert_eq!(all.len(), 25);
        all.into_iter().collect()
    };
    let (a, b) = (subset(true, 0), subset(true, 1));
    assert_eq!((a.len(), b.len()), (25, 25), "no sample twice in an epoch");
    assert_ne!(a, b, "each epoch draws its own subset");
    assert_eq!(
        subset(false, 0),
        (0..25).collect(),
        "unshuffled: the first 25"
    );
    assert_eq!(subset(false, 4), (0..25).collect());
    assert!(Loader::new(
        Arc::clone(&pack),
        LoaderConfig {
            limit: Some(0),
            ..cfg(10, 0, 1)
        }
    )
    .is_err());
}

#[test]
fn labels_and_plain_images_come_from_the_right_samples() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = make_pack(tmp.path(), 20, [2, 3, 3], 7);
    let (mean, std) = (vec![0.5f32, 0.25], vec![0.5f32, 0.25]);
    let c = LoaderConfig {
        mean: Some(mean.clone()),
        std: Some(std.clone()),
        ..cfg(6, 0, 1)
    };
    let loader = Loader::new(Arc::clone(&pack), c).unwrap();
    for b in loader.epoch(0).map(Result::unwrap) {
        assert_eq!(b.shape[1..], [2, 3, 3]);
        let images = b.pixels().unwrap();
        for (k, &i) in b.indices.iter().enumerate() {
            assert_eq!(b.labels[k], (i % 7) as i64);
            for (p, &px) in pack.image(i).iter().enumerate() {
                let ch = p / 9;
                let want = (f32::from(px) / 255.0 - mean[ch]) / std[ch];
                assert!((images[k * 18 + p] - want).abs() < 1e-5);
            }
        }
    }
}

fn collect(pack: &Arc<Pack>, c: LoaderConfig, epoch: u64) -> Vec<Batch> {
    Loader::new(Arc::clone(pack), c)
        .unwrap()
        .epoch(epoch)
        .map(Result::unwrap)
        .collect()
}

/// What a batch delivers: its samples, labels and image values.
fn contents(batches: &[Batch]) -> Vec<(Vec<usize>, Vec<i64>, Vec<f32>)> {
    (batches.iter())
        .map(|b| (b.indices.clone(), b.labels.clone(), b.pixels().unwrap()))
        .collect()
}

#[test]
fn deterministic_for_seed_epoch_rank_whatever_the_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = make_pack(tmp.path(), 77, [3, 8, 8], 10);
    let base = LoaderConfig {
        augment: Augment::CropFlip { pad: 2 },
        ..cfg(16, 1, 2)
    };
    let a = collect(&pack, base.clone(), 5);
    let b = collect(
        &pack,
        LoaderConfig {
            workers: 3,
            prefetch: 1,
            ..base.clone()
        },
        5,
    );
    let c = collect(
        &pack,
        LoaderConfig {
            workers: 1,
            prefetch: 4,
            ..base.clone()
        },
        5,
    );
    assert_eq!(contents(&a), contents(&b));
    assert_eq!(contents(&a), contents(&c));
    // Another epoch or seed reshuffles and re-augments.
    let other_epoch = collect(&pack, base.clone(), 6);
    assert_ne!(a[0].indices, other_epoch[0].indices);
    let other_seed = collect(
        &pack,
        LoaderConfig {
            seed: 43,
            ..base.clone()
        },
        5,
    );
    assert_ne!(a[0].indices, other_seed[0].indices);
    // Without shuffling, file order.
    let ordered = collect(
        &pack,
        LoaderConfig {
            shuffle: false,
            ..cfg(10, 0, 1)
        },
        9,
    );
    assert_eq!(ordered[0].indices, (0..10).collect::<Vec<_>>());
}

#[test]
fn a_samples_augmentation_does_not_depend_on_the_group_size() {
    // Data parallelism must not change the data: rank shares of a group of 3 reassemble into
    // exactly the batches one rank alone would see, pixel for pixel.
    let tmp = tempfile::tempdir().unwrap();
    let pack = make_pack(tmp.path(), 40, [3, 10, 10], 4);
    for aug in [
        Augment::CropFlip { pad: 3 },
        Augment::random_resized_crop(6),
    ] {
        let single = collect(
            &pack,
            LoaderConfig {
                augment: aug.clone(),
                ..cfg(12, 0, 1)
            },
            2,
        );
        let shares: Vec<Vec<Batch>> = (0..3)
            .map(|r| {
                collect(
                    &pack,
                    LoaderConfig {
                        augment: aug.clone(),
                        ..cfg(12, r, 3)
                    },
                    2,
                )
            })
            .collect();
        for (step, whole) in single.iter().enumerate() {
            let joined: Vec<f32> = shares
                .iter()
                .flat_map(|s| s[step].pixels().unwrap())
                .collect();
            let idx: Vec<usize> = shares
                .iter()
                .flat_map(|s| s[step].indices.clone())
                .collect();
            assert_eq!(idx, whole.indices);
            assert_eq!(joined, whole.pixels().unwrap(), "{aug:?} step {step}");
        }
    }
}

#[test]
fn augmentation_actually_varies_between_epochs() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = make_pack(tmp.path(), 8, [1, 8, 8], 2);
    let c = LoaderConfig {
        shuffle: false,
        augment: Augment::CropFlip { pad: 4 },
        ..cfg(8, 0, 1)
    };
    let epochs: Vec<Vec<f32>> = (0..4)
        .map(|e| collect(&pack, c.clone(), e)[0].pixels().unwrap())
        .collect();
    assert!(epochs.windows(2).all(|w| w[0] != w[1]));
}

#[test]
fn dropping_an_epoch_early_stops_the_workers() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = make_pack(tmp.path(), 500, [1, 4, 4], 3);
    let loader = Loader::new(
        pack,
        LoaderConfig {
            prefetch: 1,
            ..cfg(2, 0, 1)
        },
    )
    .unwrap();
    let mut it = loader.epoch(0);
    assert_eq!(it.len(), 250);
    assert!(it.next().is_some());
    drop(it); // must return: workers blocked on a full queue see the hang-up
}

#[test]
fn bad_configurations_are_refused_with_reasons() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = make_pack(tmp.path(), 10, [3, 8, 8], 2);
    let err = |c: LoaderConfig| match Loader::new(Arc::clone(&pack), c) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted"),
    };
    assert!(err(cfg(4, 2, 2)).contains("rank 2 is not in a group of 2"));
    assert!(err(cfg(2, 0, 3)).contains("smaller than the group"));
    assert!(err(LoaderConfig {
        augment: Augment::CenterCrop { size: 9 },
        ..cfg(4, 0, 1)
    })
    .contains("does not fit the 8x8"));
    assert!(err(LoaderConfig {
        mean: Some(vec![0.5]),
        ..cfg(4, 0, 1)
    })
    .contains("3 means"));
    assert!(err(LoaderConfig {
        std: Some(vec![1.0, 0.0, 1.0]),
        ..cfg(4, 0, 1)
    })
    .contains("not positive"));
    assert!(err(LoaderConfig {
        workers: 0,
        ..cfg(4, 0, 1)
    })
    .contains("at least 1"));
    let rrc = Augment::RandomResizedCrop {
        size: 4,
        scale: (0.5, 0.2),
        ratio: (0.75, 1.33),
    };
    assert!(err(LoaderConfig {
        augment: rrc,
        ..cfg(4, 0, 1)
    })
    .contains("scale.min"));
}

#[test]
fn missing_split_suggests_the_preparation_command() {
    let tmp = tempfile::tempdir().unwrap();
    let e = open_split(tmp.path(), "val").unwrap_err().to_string();
    assert!(
        e.contains("val.aipk not found") && e.contains("aiperf-data-prep fashion-mnist"),
        "{e}"
    );
}

#[test]
fn the_device_path_computes_the_cpu_paths_function() {
    // Every augmentation the device runs, on CPU tensors (what a GPU runs, op for op):
    // the same samples, the same draws, the same values within float rounding; crop-flip
    // (zero padding) stays on the loader threads under the device setting.
    let tmp = tempfile::tempdir().unwrap();
    let pack = make_pack(tmp.path(), 30, [3, 20, 17], 5);
    for aug in [
        Augment::None,
        Augment::CenterCrop { size: 11 },
        Augment::random_resized_crop(13),
        Augment::random_resized_crop(29),
        Augment::CropFlip { pad: 2 },
    ] {
        let run = |output| {
            let c = LoaderConfig {
                augment: aug.clone(),
                output,
                ..cfg(8, 1, 2)
            };
            collect(&pack, c, 3)
        };
        let (cpu, dev) = (run(Output::Host), run(Output::Device));
        assert_eq!(cpu.len(), dev.len());
        for (a, b) in cpu.iter().zip(&dev) {
            assert_eq!(
                (&a.indices, &a.labels, a.shape),
                (&b.indices, &b.labels, b.shape)
            );
            let raw = matches!(b.images, Images::Raw(_));
            assert_eq!(raw, !matches!(aug, Augment::CropFlip { .. }), "{aug:?}");
            let (x, y) = (a.pixels().unwrap(), b.pixels().unwrap());
            let worst = x
                .iter()
                .zip(&y)
                .map(|(p, q)| (p - q).abs())
                .fold(0f32, f32::max);
            assert!(worst <= 1e-5, "{aug:?}: largest difference {worst}");
        }
    }
}

#[test]
fn channels_last_batches_hold_the_same_images_in_nhwc_memory() {
    let dir = tempfile::tempdir().unwrap();
    for c in [1u32, 3] {
        let sub = dir.path().join(c.to_string());
        std::fs::create_dir_all(&sub).unwrap();
        let pack = make_pack(&sub, 12, [c, 6, 5], 3);
        let crop = LoaderConfig {
            augment: Augment::CropFlip { pad: 2 },
            ..cfg(4, 0, 1)
        };
        let nchw = collect(&pack, crop.clone(), 1);
        let nhwc = collect(
            &pack,
            LoaderConfig {
                channels_last: true,
                ..crop
            },
            1,
        );
        for (a, b) in nchw.iter().zip(&nhwc) {
            let (x, _) = a.to_tensors(tch::Device::Cpu).unwrap();
            let (y, _) = b.to_tensors(tch::Device::Cpu).unwrap();
            assert_eq!(x.size(), y.size());
            assert!(x.equal(&y), "c = {c}: the same values");
            assert!(crate::train::memory_format::is_channels_last(&y), "c = {c}");
            if c > 1 {
                // NHWC in memory: the channels of a pixel lie next to each other.
                assert_eq!(y.stride(), [6 * 5 * 3, 1, 5 * 3, 3]);
            }
        }
    }
}
