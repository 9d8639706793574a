//! Round trips and malformed-input checks for every converter, on small files written here in
//! the real formats (IDX, CIFAR-10 binary, JPEGs in the ImageNet layout).

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use aiperf_data_prep::cifar::convert_cifar10;
use aiperf_data_prep::idx::{convert_idx_dir, IdxDataset};
use aiperf_data_prep::imagenet::{convert_imagenet, load_and_crop, ImagenetOptions};
use aiperf_data_prep::{split_path, Pack, PrepError};
use common::{assert_no_leftovers, idx_bytes, quiet, write_cifar, write_idx, write_imagenet};

fn assert_pack_holds(pack: &Pack, images: &[u8], labels: &[u8]) {
    let b = pack.header().image_bytes();
    assert_eq!(pack.len() * b, images.len());
    for i in 0..pack.len() {
        assert_eq!(pack.image(i), &images[i * b..(i + 1) * b], "image {i}");
        assert_eq!(pack.label(i), u16::from(labels[i]), "label {i}");
    }
    pack.verify().unwrap();
}

#[test]
fn idx_round_trip_plain_and_gzipped() {
    for gzip in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let set = write_idx(&tmp.path().join("src"), 37, 11, gzip);
        let out = tmp.path().join("out");
        let headers =
            convert_idx_dir(&tmp.path().join("src"), &out, IdxDataset::FashionMnist).unwrap();
        assert_eq!(headers.len(), 2);
        let train = Pack::open(&split_path(&out, "train")).unwrap();
        let val = Pack::open(&split_path(&out, "val")).unwrap();
        assert_eq!((train.len(), val.len()), (37, 11));
        let h = train.header();
        assert_eq!(
            (h.channels, h.height, h.width, h.num_classes),
            (1, 5, 4, 10)
        );
        assert_eq!(h.class_names[9], "Ankle boot");
        assert_eq!(
            h.pixel_sum,
            set.train_images.iter().map(|&p| u64::from(p)).sum::<u64>()
        );
        let mean = set.train_images.iter().map(|&p| f64::from(p)).sum::<f64>()
            / set.train_images.len() as f64
            / 255.0;
        assert!((h.channel_mean[0] - mean).abs() < 1e-12);
        assert_eq!(h.class_counts.iter().sum::<u64>(), 37);
        assert_pack_holds(&train, &set.train_images, &set.train_labels);
        assert_pack_holds(&val, &set.test_images, &set.test_labels);
        assert_no_leftovers(&out);
    }
}

fn idx_error(mutate: impl FnOnce(&Path)) -> (PrepError, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_idx(&src, 8, 4, false);
    mutate(&src);
    let out = tmp.path().join("out");
    let err = convert_idx_dir(&src, &out, IdxDataset::Mnist).unwrap_err();
    assert_no_leftovers(&out);
    for split in ["train", "val"] {
        assert!(
            !split_path(&out, split).exists(),
            "no {split} pack after a failed conversion"
        );
    }
    (err, src)
}

#[test]
fn idx_wrong_magic_names_the_file() {
    let (err, _) = idx_error(|src| {
        let p = src.join("train-labels-idx1-ubyte");
        let mut b = fs::read(&p).unwrap();
        b[3] = 3; // claims 3 dimensions: an image file where labels belong
        fs::write(p, b).unwrap();
    });
    assert!(matches!(err, PrepError::BadMagic { .. }), "{err}");
    assert!(err.to_string().contains("train-labels-idx1-ubyte"), "{err}");
}

#[test]
fn idx_truncated_file_is_reported_with_sizes() {
    let (err, _) = idx_error(|src| {
        let p = src.join("t10k-images-idx3-ubyte");
        let b = fs::read(&p).unwrap();
        fs::write(&p, &b[..b.len() - 7]).unwrap();
    });
    let PrepError::Truncated {
        path,
        expected_bytes,
        found_bytes,
    } = &err
    else {
        panic!("{err}")
    };
    assert!(path.ends_with("t10k-images-idx3-ubyte"));
    assert_eq!(expected_bytes - found_bytes, 7);
}

#[test]
fn idx_truncated_gzip_stream_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_idx(&src, 8, 4, true);
    let p = src.join("train-images-idx3-ubyte.gz");
    let b = fs::read(&p).unwrap();
    fs::write(&p, &b[..b.len() / 2]).unwrap();
    let err = convert_idx_dir(&src, &tmp.path().join("out"), IdxDataset::Mnist).unwrap_err();
    assert!(
        err.to_string().contains("train-images-idx3-ubyte.gz"),
        "{err}"
    );
}

#[test]
fn idx_count_mismatch_names_both_files() {
    let (err, _) = idx_error(|src| {
        fs::write(
            src.join("train-labels-idx1-ubyte"),
            idx_bytes(&[7], &[1; 7]),
        )
        .unwrap();
    });
    let PrepError::CountMismatch {
        n_images, n_labels, ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!((*n_images, *n_labels), (8, 7));
    let msg = err.to_string();
    assert!(
        msg.contains("train-images-idx3-ubyte") && msg.contains("train-labels-idx1-ubyte"),
        "{msg}"
    );
}

#[test]
fn idx_label_out_of_range_gives_index_and_value() {
    let (err, _) = idx_error(|src| {
        fs::write(
            src.join("t10k-labels-idx1-ubyte"),
            idx_bytes(&[4], &[0, 1, 10, 2]),
        )
        .unwrap();
    });
    let PrepError::LabelOutOfRange {
        index,
        label,
        num_classes,
        ..
    } = err
    else {
        panic!("{err}")
    };
    assert_eq!((index, label, num_classes), (2, 10, 10));
}

#[test]
fn idx_missing_file_says_what_was_expected() {
    let (err, _) = idx_error(|src| fs::remove_file(src.join("t10k-labels-idx1-ubyte")).unwrap());
    assert!(matches!(err, PrepError::Missing { .. }));
    assert!(
        err.to_string().contains("t10k-labels-idx1-ubyte.gz"),
        "{err}"
    );
}

#[test]
fn cifar_round_trip_keeps_order_pixels_and_names() {
    let tmp = tempfile::tempdir().unwrap();
    let files = write_cifar(&tmp.path().join("src"), 6);
    let out = tmp.path().join("out");
    convert_cifar10(&tmp.path().join("src"), &out).unwrap();
    let train = Pack::open(&split_path(&out, "train")).unwrap();
    let val = Pack::open(&split_path(&out, "val")).unwrap();
    assert_eq!((train.len(), val.len()), (30, 6));
    assert_eq!(train.header().class_names[1], "automobile");
    assert_eq!((train.header().channels, train.header().height), (3, 32));
    let split = |recs: &[Vec<u8>]| {
        let (mut imgs, mut labels) = (Vec::new(), Vec::new());
        for f in recs {
            for r in f.chunks_exact(3073) {
                labels.push(r[0]);
                imgs.extend_from_slice(&r[1..]);
            }
        }
        (imgs, labels)
    };
    let (ti, tl) = split(&files[..5]);
    assert_pack_holds(&train, &ti, &tl);
    let (vi, vl) = split(&files[5..]);
    assert_pack_holds(&val, &vi, &vl);
}

#[test]
fn cifar_malformed_inputs_are_named() {
    // A record short.
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_cifar(&src, 3);
    let p = src.join("data_batch_3.bin");
    let b = fs::read(&p).unwrap();
    fs::write(&p, &b[..b.len() - 100]).unwrap();
    let err = convert_cifar10(&src, &tmp.path().join("out")).unwrap_err();
    assert!(
        matches!(err, PrepError::Truncated { .. }) && err.to_string().contains("data_batch_3.bin"),
        "{err}"
    );
    assert_no_leftovers(&tmp.path().join("out"));

    // A label beyond the class list.
    write_cifar(&src, 3);
    let p = src.join("test_batch.bin");
    let mut b = fs::read(&p).unwrap();
    b[3073] = 12;
    fs::write(&p, b).unwrap();
    let err = convert_cifar10(&src, &tmp.path().join("out")).unwrap_err();
    let PrepError::LabelOutOfRange { index, label, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!((*index, *label), (1, 12));
    assert!(err.to_string().contains("test_batch.bin"));

    // A missing batch.
    write_cifar(&src, 3);
    fs::remove_file(src.join("data_batch_5.bin")).unwrap();
    let err = convert_cifar10(&src, &tmp.path().join("out")).unwrap_err();
    assert!(err.to_string().contains("data_batch_5.bin"), "{err}");
}

#[test]
fn imagenet_resizes_crops_and_labels_by_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    let out = tmp.path().join("out");
    let opts = ImagenetOptions {
        synsets: Some(root.join("synsets.txt")),
        ..quiet(16)
    };
    convert_imagenet(&root, &out, &opts).unwrap();
    let train = Pack::open(&split_path(&out, "train")).unwrap();
    let val = Pack::open(&split_path(&out, "val")).unwrap();
    let h = train.header();
    assert_eq!((train.len(), val.len()), (9, 3));
    assert_eq!((h.channels, h.height, h.width), (3, 16, 16));
    // Readable names where the synset file has them, the wnid otherwise.
    assert_eq!(
        h.class_names,
        vec!["tench, Tinca tinca", "goldfish", "n01484850"]
    );
    for i in 0..train.len() {
        let label = train.label(i) as usize;
        assert_eq!(label, i / 3, "sorted wnid order");
        let img = train.image(i);
        // The tinted channel keeps the dark-left / bright-right split after resize + crop.
        let plane = &img[label * 256..(label + 1) * 256];
        let (left, right) = (plane[8 * 16 + 1], plane[8 * 16 + 14]);
        assert!(
            left < 80 && right > 170,
            "image {i}: left {left}, right {right}"
        );
        // An untinted channel stays near 60.
        let other = &img[((label + 1) % 3) * 256..((label + 1) % 3 + 1) * 256];
        assert!(other.iter().all(|&p| (40..=80).contains(&p)), "image {i}");
    }
    assert_eq!(
        (0..3).map(|i| val.label(i)).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    val.verify().unwrap();
}

#[test]
fn imagenet_flat_val_with_kaggle_labels() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, true);
    let out = tmp.path().join("out");
    let opts = ImagenetOptions {
        val_labels: Some(root.join("LOC_val_solution.csv")),
        limit_per_class: Some(2),
        ..quiet(12)
    };
    convert_imagenet(&root, &out, &opts).unwrap();
    let train = Pack::open(&split_path(&out, "train")).unwrap();
    let val = Pack::open(&split_path(&out, "val")).unwrap();
    assert_eq!(train.len(), 6, "limit of 2 per class");
    assert_eq!(
        (0..3).map(|i| val.label(i)).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );

    // Without the labels file a flat val/ is an error that says what to pass.
    let err = convert_imagenet(&root, &tmp.path().join("o2"), &quiet(12)).unwrap_err();
    assert!(err.to_string().contains("--val-labels"), "{err}");

    // A label naming a class that has no training folder.
    fs::write(root.join("bad.csv"), "ILSVRC2012_val_00000000 n99999999\nILSVRC2012_val_00000001 n01443537\nILSVRC2012_val_00000002 n01484850\n").unwrap();
    let opts = ImagenetOptions {
        val_labels: Some(root.join("bad.csv")),
        ..quiet(12)
    };
    let err = convert_imagenet(&root, &tmp.path().join("o3"), &opts).unwrap_err();
    assert!(
        err.to_string().contains("n99999999") && err.to_string().contains("bad.csv"),
        "{err}"
    );

    // A labels file that lists fewer images than val/ holds.
    fs::write(
        root.join("short.csv"),
        "ILSVRC2012_val_00000000 n01440764\nILSVRC2012_val_00000001 n01443537\n",
    )
    .unwrap();
    let opts = ImagenetOptions {
        val_labels: Some(root.join("short.csv")),
        ..quiet(12)
    };
    let err = convert_imagenet(&root, &tmp.path().join("o4"), &opts).unwrap_err();
    assert!(err.to_string().contains("ILSVRC2012_val_00000002"), "{err}");
}

#[test]
fn imagenet_bad_jpeg_fails_or_is_skipped_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    let bad = root.join("train/n01443537/broken.JPEG");
    fs::write(&bad, b"\xff\xd8\xff\xe0 this is not really a jpeg").unwrap();
    let out = tmp.path().join("out");
    let err = convert_imagenet(&root, &out, &quiet(8)).unwrap_err();
    assert!(matches!(err, PrepError::BadJpeg { .. }), "{err}");
    assert!(
        err.to_string().contains("broken.JPEG") && err.to_string().contains("--skip-bad"),
        "{err}"
    );
    assert_no_leftovers(&out);
    assert!(!split_path(&out, "train").exists());

    let opts = ImagenetOptions {
        skip_bad: true,
        ..quiet(8)
    };
    convert_imagenet(&root, &out, &opts).unwrap();
    let train = Pack::open(&split_path(&out, "train")).unwrap();
    assert_eq!(train.len(), 9);
    assert_eq!(train.header().skipped, 1);
}

fn data_prep() -> Command {
    Command::new(env!("CARGO_BIN_EXE_aiperf-data-prep"))
}

#[test]
fn cli_converts_and_reports_errors_with_nonzero_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_idx(&src, 9, 3, true);
    let out = tmp.path().join("out");
    let ok = data_prep()
        .args(["mnist", "--src"])
        .arg(&src)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(
        stdout.contains("train        9 images 1x5x4") && stdout.contains("val          3 images"),
        "{stdout}"
    );

    let info = data_prep()
        .arg("info")
        .arg(split_path(&out, "train"))
        .arg("--verify")
        .output()
        .unwrap();
    assert!(info.status.success());
    let header: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(header["num_samples"], 9);

    // Corrupt one pixel: info --verify must fail and name the file.
    let p = split_path(&out, "train");
    let mut b = fs::read(&p).unwrap();
    b[4096 + 5] ^= 0xff;
    fs::write(&p, b).unwrap();
    let bad = data_prep()
        .arg("info")
        .arg(&p)
        .arg("--verify")
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("checksum mismatch") && stderr.contains("train.aipk"),
        "{stderr}"
    );

    let missing = data_prep()
        .args(["cifar10", "--src", "/nonexistent/cifar", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/cifar/batches.meta.txt")
    );
}

/// A JPEG cut to half its bytes is refused, naming it and the cut; with --skip-bad it is
/// skipped and counted. (Decoders fill a cut file with grey silently.)
#[test]
fn regression_a_truncated_jpeg_is_refused_or_skipped_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    let cut = root.join("train/n01443537/n01443537_0.JPEG");
    let bytes = fs::read(&cut).unwrap();
    fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let out = tmp.path().join("out");
    let err = convert_imagenet(&root, &out, &quiet(8)).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, PrepError::BadJpeg { .. })
            && msg.contains("n01443537_0.JPEG")
            && msg.contains("truncated")
            && msg.contains("--skip-bad"),
        "{msg}"
    );
    assert_no_leftovers(&out);
    let opts = ImagenetOptions {
        skip_bad: true,
        ..quiet(8)
    };
    let headers = convert_imagenet(&root, &out, &opts).unwrap();
    assert_eq!((headers[0].num_samples, headers[0].skipped), (8, 1));
    // Cut in the header or in the scan data: refused. Only the end-of-image marker missing,
    // every scan whole: the image is complete, and decodes.
    let probe = tmp.path().join("probe.JPEG");
    for (end, whole) in [(2, false), (20, false), (bytes.len() - 3, false)] {
        fs::write(&probe, &bytes[..end]).unwrap();
        assert_eq!(load_and_crop(&probe, 8).is_ok(), whole, "cut at {end}");
    }
    fs::write(&probe, &bytes[..bytes.len() - 2]).unwrap();
    let without_eoi = load_and_crop(&probe, 8).unwrap();
    fs::write(&probe, &bytes).unwrap();
    assert_eq!(without_eoi, load_and_crop(&probe, 8).unwrap());
}

/// The flags of `imagenet` and `info` that cannot work are refused up front,
/// naming the flag or file and the fix, each I/O error said once.
#[test]
fn regression_data_prep_flags_and_files_name_themselves() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    let out = tmp.path().join("out");
    let run = |args: &[&str]| {
        let o = data_prep().args(args).output().unwrap();
        assert!(!o.status.success(), "{args:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let (src, dst) = (root.to_str().unwrap(), out.to_str().unwrap());
    let missing = tmp.path().join("no-labels.txt");
    let err = run(&[
        "imagenet",
        "--src",
        src,
        "--out",
        dst,
        "--val-labels",
        missing.to_str().unwrap(),
    ]);
    assert!(
        err.contains("no-labels.txt") && err.contains("--val-labels"),
        "{err}"
    );
    let err = run(&[
        "imagenet",
        "--src",
        src,
        "--out",
        dst,
        "--threads",
        "100000",
    ]);
    assert!(
        err.contains("--threads 100000") && err.contains("at most 1024"),
        "{err}"
    );
    assert!(!out.exists(), "nothing written");
    // `info` on a folder says so, and names its packs.
    let err = run(&["info", tmp.path().to_str().unwrap()]);
    assert!(err.contains("a folder, not a pack"), "{err}");
    // An I/O error names the file and says the OS error once.
    let blocked = tmp.path().join("blocked");
    fs::write(&blocked, "a file where the output folder should be").unwrap();
    let err = run(&[
        "imagenet",
        "--src",
        src,
        "--out",
        blocked.join("x").to_str().unwrap(),
    ]);
    assert!(err.contains("blocked"), "{err}");
    let os = err.rsplit(": ").next().unwrap().trim();
    assert_eq!(err.matches(os).count(), 1, "said once: {err}");
}
