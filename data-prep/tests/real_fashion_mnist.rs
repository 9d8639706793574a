//! Conversion of the real Fashion-MNIST, checked against recorded checksums. The dataset is
//! a prerequisite installed by scripts/dev/setup: without it the test skips, unless
//! `AIPERF_REQUIRE_PREREQS=1` (set by `make test`) makes a missing prerequisite a failure.

use std::path::PathBuf;

use aiperf_data_prep::idx::{convert_idx_dir, IdxDataset};
use aiperf_data_prep::{split_path, Pack};

/// Whether missing prerequisites must fail the tests rather than skip them.
fn prerequisites_required() -> bool {
    std::env::var_os("AIPERF_REQUIRE_PREREQS").is_some_and(|v| v == "1")
}

/// Reports a missing prerequisite: a failure under `AIPERF_REQUIRE_PREREQS=1`, else a skip.
fn prerequisite_missing(what: &str) {
    assert!(
        !prerequisites_required(),
        "{what} (AIPERF_REQUIRE_PREREQS=1: missing prerequisites fail the tests)"
    );
    eprintln!("SKIP: {what}");
}

/// The real Fashion-MNIST from the Debian package `dataset-fashion-mnist` (or from
/// `$FMNIST_SRC`, as in scripts/tools/prepare-data).
#[test]
fn real_fashion_mnist_converts_with_recorded_checksums() {
    let src = std::env::var_os("FMNIST_SRC")
        .map_or_else(|| "/usr/share/datasets/fashion-mnist".into(), PathBuf::from);
    let src = src.as_path();
    if !src.is_dir() {
        prerequisite_missing(&format!(
            "{} missing: install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist; scripts/dev/setup does it)",
            src.display()
        ));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let headers = convert_idx_dir(src, tmp.path(), IdxDataset::FashionMnist).unwrap();
    let (train, val) = (&headers[0], &headers[1]);
    assert_eq!((train.num_samples, val.num_samples), (60_000, 10_000));
    assert_eq!(
        (train.num_classes, train.height, train.width, train.channels),
        (10, 28, 28, 1)
    );
    // Fashion-MNIST is balanced: 6000 and 1000 images per class.
    assert!(train.class_counts.iter().all(|&c| c == 6000));
    assert!(val.class_counts.iter().all(|&c| c == 1000));
    // Recorded from the Debian package's files (Zalando's release of 2017), computed
    // independently with Python: sum(gzip.open(f).read()[16:]) for each image file.
    assert_eq!(train.pixel_sum, FMNIST_TRAIN_PIXEL_SUM);
    assert_eq!(val.pixel_sum, FMNIST_VAL_PIXEL_SUM);
    // The usual normalisation constants of Fashion-MNIST: mean 0.2860, std 0.3530.
    assert!(
        (train.channel_mean[0] - 0.2860).abs() < 5e-4,
        "{}",
        train.channel_mean[0]
    );
    assert!(
        (train.channel_std[0] - 0.3530).abs() < 5e-4,
        "{}",
        train.channel_std[0]
    );
    Pack::open(&split_path(tmp.path(), "train"))
        .unwrap()
        .verify()
        .unwrap();
}

const FMNIST_TRAIN_PIXEL_SUM: u64 = 3_431_114_169;
const FMNIST_VAL_PIXEL_SUM: u64 = 573_469_082;
