//! Regression tests, each named after the defect it pins. The binary runs under
//! [`AllocGuard`], so an allocation of more than [`common::alloc_guard::REFUSE_ABOVE_BYTES`]
//! aborts it, and tests assert that no allocation exceeded
//! [`common::alloc_guard::HUGE_BYTES`].

mod common;

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use aiperf_data_prep::cifar::convert_cifar10;
use aiperf_data_prep::idx::{convert_idx_dir, decode_idx, parse_idx, IdxDataset};
use aiperf_data_prep::imagenet::{convert_imagenet, load_and_crop, ImagenetOptions, MAX_SIZE};
use aiperf_data_prep::{split_path, Header, Pack, PackWriter, PrepError, Source};
use common::alloc_guard::{assert_no_huge_allocation, AllocGuard};
use common::mutate::rewrite_pack_header;
use common::{
    assert_no_leftovers, bytes, dataset_bytes, earlier_dataset, gz, idx_bytes, jpeg, quiet,
    run_mnist, write_cifar, write_idx, write_imagenet,
};

#[global_allocator]
static GUARD: AllocGuard = AllocGuard;

/// Neither split of a dataset exists in `out`, nor any temporary file.
fn assert_no_dataset(out: &Path) {
    assert_no_leftovers(out);
    for split in ["train", "val"] {
        assert!(
            !split_path(out, split).exists(),
            "{split}.aipk left after a failed conversion"
        );
    }
}

#[test]
fn idx_with_no_images_of_65536x65536_is_an_error_not_a_panic() {
    for gzip in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        write_idx(&src, 4, 2, gzip);
        // n = 0 images of 65536×65536: h·w overflowed a u32 to 0 and chunks_exact(0) panicked.
        for (name, data) in [
            (
                "train-images-idx3-ubyte",
                idx_bytes(&[0, 65536, 65536], &[]),
            ),
            ("train-labels-idx1-ubyte", idx_bytes(&[0], &[])),
        ] {
            let (name, data) = if gzip {
                (format!("{name}.gz"), gz(&data))
            } else {
                (name.to_string(), data)
            };
            fs::write(src.join(name), data).unwrap();
        }
        let out = tmp.path().join("out");
        let err = convert_idx_dir(&src, &out, IdxDataset::Mnist).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("train-images-idx3-ubyte")
                && msg.contains("dimension 0 (number of images) is 0"),
            "{msg}"
        );
        assert_no_dataset(&out);
    }
    assert_no_huge_allocation("IDX with 0 images of 65536x65536");
}

#[test]
fn idx_size_fields_beyond_the_file_or_u64_are_clean_errors() {
    let path = Path::new("t10k-images-idx3-ubyte");
    let err = parse_idx(path, &idx_bytes(&[u32::MAX; 3], &[1, 2, 3]), 3).unwrap_err();
    assert!(
        err.to_string().contains("more than 2^64 bytes") && err.to_string().contains("t10k"),
        "{err}"
    );
    // One 65536×65536 image needs 4 GiB: refused from the header, gzipped or not.
    let claims_4gib = idx_bytes(&[1, 65536, 65536], &[7; 100]);
    for raw in [claims_4gib.clone(), gz(&claims_4gib)] {
        let err = decode_idx(path, &raw, 3).unwrap_err();
        let PrepError::Truncated { expected_bytes, .. } = err else {
            panic!("{err}")
        };
        assert_eq!(expected_bytes, (1 << 32) + 16);
    }
    let err = parse_idx(path, &idx_bytes(&[5, 0, 28], &[]), 3).unwrap_err();
    assert!(err.to_string().contains("dimension 1 (rows) is 0"), "{err}");
    assert_no_huge_allocation("IDX size fields");
}

#[test]
fn failed_val_split_leaves_no_train_pack() {
    // IDX: the t10k images are truncated.
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("idx");
    write_idx(&src, 8, 4, false);
    let p = src.join("t10k-images-idx3-ubyte");
    let b = fs::read(&p).unwrap();
    fs::write(&p, &b[..b.len() - 1]).unwrap();
    let out = tmp.path().join("idx-out");
    convert_idx_dir(&src, &out, IdxDataset::FashionMnist).unwrap_err();
    assert_no_dataset(&out);

    // CIFAR-10: a label of the test batch is out of range.
    let src = tmp.path().join("cifar");
    write_cifar(&src, 2);
    let p = src.join("test_batch.bin");
    let mut b = fs::read(&p).unwrap();
    b[0] = 200;
    fs::write(&p, b).unwrap();
    let out = tmp.path().join("cifar-out");
    convert_cifar10(&src, &out).unwrap_err();
    assert_no_dataset(&out);

    // ImageNet: a validation JPEG is broken.
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    fs::write(root.join("val/n01443537/v1.jpeg"), b"\xff\xd8 not a jpeg").unwrap();
    let out = tmp.path().join("imagenet-out");
    let err = convert_imagenet(&root, &out, &quiet(8)).unwrap_err();
    assert!(err.to_string().contains("v1.jpeg"), "{err}");
    assert_no_dataset(&out);
}

#[test]
fn failed_reconversion_keeps_the_previous_dataset_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let out = tmp.path().join("out");
    write_idx(&src, 8, 4, true);
    convert_idx_dir(&src, &out, IdxDataset::Mnist).unwrap();
    let before: Vec<Vec<u8>> = ["train", "val"]
        .iter()
        .map(|s| fs::read(split_path(&out, s)).unwrap())
        .collect();
    // New training data, broken validation data.
    write_idx(&src, 12, 4, true);
    fs::write(src.join("t10k-labels-idx1-ubyte.gz"), gz(&[0, 0, 8, 1])).unwrap();
    convert_idx_dir(&src, &out, IdxDataset::Mnist).unwrap_err();
    let after: Vec<Vec<u8>> = ["train", "val"]
        .iter()
        .map(|s| fs::read(split_path(&out, s)).unwrap())
        .collect();
    assert!(before == after, "the old train.aipk and val.aipk are kept");
    assert_no_leftovers(&out);
}

/// Rewrites the image height and width in a JPEG's baseline frame header (SOF0).
fn set_jpeg_dimensions(path: &Path, width: u16, height: u16) {
    let mut b = fs::read(path).unwrap();
    let sof = b.windows(2).position(|w| w == [0xff, 0xc0]).expect("SOF0");
    b[sof + 5..sof + 7].copy_from_slice(&height.to_be_bytes());
    b[sof + 7..sof + 9].copy_from_slice(&width.to_be_bytes());
    fs::write(path, b).unwrap();
}

#[test]
fn thin_1x65000_jpeg_converts_without_a_huge_allocation() {
    let tmp = tempfile::tempdir().unwrap();
    // Resizing the shorter side to 224 made a 224×14_560_000 image: a 9.8 GB allocation.
    let thin = tmp.path().join("thin.JPEG");
    jpeg(&thin, 1, 65000, 0);
    let wide = tmp.path().join("wide.JPEG");
    jpeg(&wide, 65000, 1, 1);
    for path in [&thin, &wide] {
        let chw = load_and_crop(path, 224).unwrap();
        assert_eq!(chw.len(), 3 * 224 * 224);
    }
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    fs::copy(&thin, root.join("train/n01440764/thin.JPEG")).unwrap();
    let out = tmp.path().join("out");
    convert_imagenet(&root, &out, &quiet(224)).unwrap();
    assert_eq!(Pack::open(&split_path(&out, "train")).unwrap().len(), 10);
    assert_no_huge_allocation("1x65000 JPEG");
}

#[test]
fn jpeg_beyond_the_pixel_limit_is_a_per_file_error_that_skip_bad_skips() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    let huge = root.join("train/n01484850/huge.JPEG");
    jpeg(&huge, 16, 16, 2);
    set_jpeg_dimensions(&huge, 60000, 60000);
    let err = load_and_crop(&huge, 32).unwrap_err();
    assert!(matches!(err, PrepError::ImageTooLarge { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("huge.JPEG") && msg.contains("60000x60000") && msg.contains("--skip-bad"),
        "{msg}"
    );
    let out = tmp.path().join("out");
    let err = convert_imagenet(&root, &out, &quiet(8)).unwrap_err();
    assert!(err.to_string().contains("huge.JPEG"), "{err}");
    assert_no_dataset(&out);

    let opts = ImagenetOptions {
        skip_bad: true,
        ..quiet(8)
    };
    let headers = convert_imagenet(&root, &out, &opts).unwrap();
    assert_eq!((headers[0].num_samples, headers[0].skipped), (9, 1));
    assert_no_huge_allocation("60000x60000 JPEG header");
}

#[test]
fn imagenet_output_size_beyond_the_limit_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    let out = tmp.path().join("out");
    let err = convert_imagenet(&root, &out, &quiet(MAX_SIZE + 1)).unwrap_err();
    assert!(err.to_string().contains("--size 4097"), "{err}");
    assert_no_dataset(&out);
}

#[test]
fn empty_imagenet_class_folder_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    let empty = root.join("train/n09999999");
    fs::create_dir_all(&empty).unwrap();
    fs::write(empty.join("notes.txt"), "not an image").unwrap();
    let out = tmp.path().join("out");
    let err = convert_imagenet(&root, &out, &quiet(8)).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("train/n09999999") && msg.contains("no .JPEG") && msg.contains("remove"),
        "{msg}"
    );
    assert_no_dataset(&out);

    // The same in val/.
    fs::remove_dir_all(&empty).unwrap();
    fs::remove_file(root.join("val/n01443537/v1.jpeg")).unwrap();
    let err = convert_imagenet(&root, &out, &quiet(8)).unwrap_err();
    assert!(err.to_string().contains("val/n01443537"), "{err}");
    assert_no_dataset(&out);
}

#[test]
fn imagenet_class_whose_images_are_all_skipped_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    let class = root.join("train/n09999999");
    fs::create_dir_all(&class).unwrap();
    fs::write(class.join("broken.JPEG"), b"\xff\xd8 not a jpeg").unwrap();
    let opts = ImagenetOptions {
        skip_bad: true,
        ..quiet(8)
    };
    let out = tmp.path().join("out");
    let err = convert_imagenet(&root, &out, &opts).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("train/n09999999") && msg.contains("no usable training image"),
        "{msg}"
    );
    assert_no_dataset(&out);
}

/// A small valid pack at `path`: 6 images of 2×3×4, 3 classes.
fn write_pack(path: &Path) -> Header {
    let mut w = PackWriter::create(path, "train", [2, 3, 4], 3).unwrap();
    for i in 0..6u8 {
        w.push(&[i; 24], u32::from(i % 3), Path::new("src"))
            .unwrap();
    }
    let source = Source {
        kind: "test".into(),
        dataset: "test".into(),
        inputs: vec![],
        processing: String::new(),
        subset: Some(false),
    };
    w.finish(vec!["a".into(), "b".into(), "c".into()], source, 0)
        .unwrap()
}

/// Opens `path` after editing its JSON header; returns the error's field and message.
fn layout_error(path: &Path, good: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> String {
    fs::write(path, rewrite_pack_header(good, edit)).unwrap();
    let err = Pack::open(path).unwrap_err();
    let PrepError::PackLayout { field, .. } = &err else {
        panic!("{err}")
    };
    assert!(err.to_string().contains("x.aipk"), "{err}");
    format!("{field}: {err}")
}

#[test]
fn pack_header_sizes_overflowing_u64_name_the_field_and_values() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("x.aipk");
    let h = write_pack(&path);
    let good = fs::read(&path).unwrap();

    let msg = layout_error(&path, &good, |v| v["num_samples"] = u64::MAX.into());
    assert!(
        msg.starts_with("num_samples:") && msg.contains("18446744073709551615 images of 24 bytes"),
        "{msg}"
    );
    let msg = layout_error(&path, &good, |v| {
        for f in ["channels", "height", "width"] {
            v[f] = u32::MAX.into();
        }
    });
    assert!(
        msg.starts_with("channels, height, width:") && msg.contains("4294967295x4294967295"),
        "{msg}"
    );
    let msg = layout_error(&path, &good, |v| {
        v["labels_offset"] = (h.labels_offset + 1).into()
    });
    assert!(
        msg.starts_with("labels_offset:")
            && msg.contains(&format!("is {}", h.labels_offset + 1))
            && msg.contains(&format!("= {}", h.labels_offset)),
        "{msg}"
    );
    let msg = layout_error(&path, &good, |v| v["num_samples"] = 5.into());
    assert!(msg.starts_with("labels_offset:"), "{msg}");
    let msg = layout_error(&path, &good, |v| v["class_counts"] = vec![6u64].into());
    assert!(
        msg.starts_with("class_counts:") && msg.contains("1 entries"),
        "{msg}"
    );
    let msg = layout_error(&path, &good, |v| v["images_offset"] = 0.into());
    assert!(msg.starts_with("images_offset:"), "{msg}");

    // The preamble's header offset pointing into the padding.
    let mut bad = good.clone();
    bad[16..24].copy_from_slice(&5u64.to_le_bytes());
    fs::write(&path, bad).unwrap();
    let err = Pack::open(&path).unwrap_err();
    assert!(
        err.to_string().contains("header offset") && err.to_string().contains("is 5"),
        "{err}"
    );
    assert_no_huge_allocation("pack header sizes");
}

#[test]
fn regression_a_read_only_val_aipk_leaves_the_earlier_dataset_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = earlier_dataset(tmp.path(), 12, 6);
    let val = split_path(&out, "val");
    let mut perms = fs::metadata(&val).unwrap().permissions();
    perms.set_readonly(true);
    fs::set_permissions(&val, perms).unwrap();
    let before = dataset_bytes(&out);
    // Refused from the file's mode, so also where root could write to it.
    let o = run_mnist("", &src, &out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("val.aipk: read-only") && stderr.contains("chmod u+w"),
        "{stderr}"
    );
    assert!(dataset_bytes(&out) == before, "the earlier dataset changed");
    assert!(fs::metadata(&val).unwrap().permissions().readonly());
    assert_no_leftovers(&out);
}

#[test]
fn regression_a_folder_named_val_aipk_leaves_the_earlier_dataset_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = earlier_dataset(tmp.path(), 12, 6);
    let val = split_path(&out, "val");
    fs::remove_file(&val).unwrap();
    fs::create_dir(&val).unwrap();
    fs::write(val.join("notes.txt"), "kept").unwrap();
    let train = fs::read(split_path(&out, "train")).unwrap();
    let o = run_mnist("", &src, &out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("val.aipk: a folder") && stderr.contains("move or remove"),
        "{stderr}"
    );
    assert!(fs::read(split_path(&out, "train")).unwrap() == train);
    assert_eq!(fs::read_to_string(val.join("notes.txt")).unwrap(), "kept");
    assert_no_leftovers(&out);
}

#[test]
fn regression_a_size_limited_write_leaves_the_earlier_dataset_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    // The new train.aipk (8 images) fits in 16 blocks of 512 bytes; val.aipk (2000) does not.
    let (src, out) = earlier_dataset(tmp.path(), 8, 2000);
    let before = dataset_bytes(&out);
    // Killed by SIGXFSZ in the middle of writing val.aipk.
    let o = run_mnist("ulimit -f 16;", &src, &out);
    assert_eq!(o.status.signal(), Some(25), "SIGXFSZ: {o:?}");
    assert!(dataset_bytes(&out) == before, "the earlier dataset changed");
    for e in fs::read_dir(&out).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.contains(".tmp-") {
            fs::remove_file(out.join(name)).unwrap(); // what a killed process leaves
        }
    }
    // With the signal ignored, the write fails with EFBIG: an error naming the file.
    let o = run_mnist("trap '' XFSZ; ulimit -f 16;", &src, &out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("val.aipk.tmp-")
            && stderr.contains("writing the new pack failed")
            && stderr.contains("earlier dataset was left as it was"),
        "{stderr}"
    );
    assert!(dataset_bytes(&out) == before, "the earlier dataset changed");
    assert_no_leftovers(&out);
}

#[test]
fn regression_train_and_validation_image_shapes_must_agree() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_idx(&src, 3, 2, false);
    // Fashion-MNIST's 28×28 training images beside 32×32 test images.
    for (prefix, n, side) in [("train", 3u32, 28u32), ("t10k", 2, 32)] {
        let pixels = bytes((n * side * side) as usize, side);
        let images = idx_bytes(&[n, side, side], &pixels);
        fs::write(src.join(format!("{prefix}-images-idx3-ubyte")), images).unwrap();
    }
    let out = tmp.path().join("out");
    let err = convert_idx_dir(&src, &out, IdxDataset::FashionMnist).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("t10k-images-idx3-ubyte: validation images are 32x32")
            && msg.contains("train-images-idx3-ubyte are 28x28"),
        "{msg}"
    );
    assert_no_dataset(&out);
}

/// Replaces a training JPEG with a damaged 400×300 one: refused, naming it and `reason`;
/// with --skip-bad, skipped and counted.
fn assert_damaged_jpeg_refused_or_skipped(damage: impl Fn(&[u8]) -> Vec<u8>, reason: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    let path = root.join("train/n01484850/n01484850_1.JPEG");
    jpeg(&path, 400, 300, 2);
    fs::write(&path, damage(&fs::read(&path).unwrap())).unwrap();
    let out = tmp.path().join("out");
    let err = convert_imagenet(&root, &out, &quiet(8)).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, PrepError::BadJpeg { .. })
            && msg.contains("n01484850_1.JPEG")
            && msg.contains(reason)
            && msg.contains("--skip-bad"),
        "{msg}"
    );
    assert_no_dataset(&out);
    let opts = ImagenetOptions {
        skip_bad: true,
        ..quiet(8)
    };
    let headers = convert_imagenet(&root, &out, &opts).unwrap();
    assert_eq!((headers[0].num_samples, headers[0].skipped), (8, 1));
}

/// Where the start-of-scan header of `b` ends.
fn scan_start(b: &[u8]) -> usize {
    let sos = b.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
    sos + 2 + usize::from(u16::from_be_bytes([b[sos + 2], b[sos + 3]]))
}

#[test]
fn regression_a_jpeg_cut_at_half_with_an_end_of_image_marker_is_refused_or_skipped() {
    let damage = |b: &[u8]| {
        assert!(b.len() / 2 > scan_start(b), "the cut lies in the scan data");
        [&b[..b.len() / 2], &[0xFF, 0xD9][..]].concat()
    };
    assert_damaged_jpeg_refused_or_skipped(damage, "truncated or corrupt scan data");
}

#[test]
fn regression_a_jpeg_with_headers_but_no_scan_data_is_refused_or_skipped() {
    let no_data = |b: &[u8]| [&b[..scan_start(b)], &[0xFF, 0xD9][..]].concat();
    assert_damaged_jpeg_refused_or_skipped(no_data, "truncated or corrupt scan data");
    // Not even the start-of-scan header.
    let no_scan = |b: &[u8]| {
        let sos = b.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
        [&b[..sos], &[0xFF, 0xD9][..]].concat()
    };
    assert_damaged_jpeg_refused_or_skipped(no_scan, "headers but no scan data");
}

#[test]
fn regression_a_val_labels_file_giving_one_image_two_classes_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, true);
    let labels = root.join("two.csv");
    let mut csv = fs::read_to_string(root.join("LOC_val_solution.csv")).unwrap();
    csv.push_str("ILSVRC2012_val_00000001,n01484850 1 2 3 4\n");
    fs::write(&labels, csv).unwrap();
    let opts = ImagenetOptions {
        val_labels: Some(labels),
        ..quiet(8)
    };
    let out = tmp.path().join("out");
    let msg = convert_imagenet(&root, &out, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("two.csv: image ILSVRC2012_val_00000001 is given two classes")
            && msg.contains("n01443537 (line 3) and n01484850 (line 5)"),
        "{msg}"
    );
    assert_no_dataset(&out);
}

#[test]
fn regression_a_val_labels_file_contradicting_the_val_class_folders_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("imagenet");
    write_imagenet(&root, false);
    let labels = root.join("val.txt");
    let out = tmp.path().join("out");
    let opts = ImagenetOptions {
        val_labels: Some(labels.clone()),
        ..quiet(8)
    };
    // Agreeing with the folders (and silent on v2): fine.
    fs::write(&labels, "v0 n01440764\nv1 n01443537\n").unwrap();
    convert_imagenet(&root, &out, &opts).unwrap();
    let before = dataset_bytes(&out);
    fs::write(&labels, "v0 n01440764\nv1 n01484850\n").unwrap();
    let msg = convert_imagenet(&root, &out, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("val.txt: image v1 is in the class folder n01443537")
            && msg.contains("gives it class n01484850"),
        "{msg}"
    );
    assert!(dataset_bytes(&out) == before);
    assert_no_leftovers(&out);
}

/// Converts a CIFAR-10 folder changed by `edit`; returns the error, no dataset written.
fn cifar_error(edit: impl FnOnce(&Path)) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_cifar(&src, 2);
    edit(&src);
    let out = tmp.path().join("out");
    let err = convert_cifar10(&src, &out).unwrap_err().to_string();
    assert_no_dataset(&out);
    err
}

#[test]
fn regression_cifar_class_names_must_match_the_labels_present() {
    let meta = |src: &Path| src.join("batches.meta.txt");
    // 11 names: the 11th would be a class without a sample.
    let msg = cifar_error(|src| {
        let names = fs::read_to_string(meta(src)).unwrap();
        fs::write(meta(src), names + "unicorn\n").unwrap();
    });
    assert!(
        msg.contains("batches.meta.txt: 11 class names, but CIFAR-10 has 10"),
        "{msg}"
    );
    // 3 names: the meta file is blamed, not a batch whose labels reach 9.
    let msg = cifar_error(|src| fs::write(meta(src), "a\nb\nc\n").unwrap());
    assert!(
        msg.contains("batches.meta.txt: 3 class names") && !msg.contains("data_batch"),
        "{msg}"
    );
    // 10 names, but no training record of class 9.
    let msg = cifar_error(|src| {
        for i in 1..=5 {
            let p = src.join(format!("data_batch_{i}.bin"));
            let mut b = fs::read(&p).unwrap();
            for r in b.chunks_exact_mut(3073).filter(|r| r[0] == 9) {
                r[0] = 0;
            }
            fs::write(&p, b).unwrap();
        }
    });
    assert!(
        msg.contains("batches.meta.txt: class 9 (\"truck\") has no sample"),
        "{msg}"
    );
}
