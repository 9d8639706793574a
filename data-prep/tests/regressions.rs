//! Regression tests, each named after the defect it pins. The binary runs under
//! [`AllocGuard`], so an allocation of more than [`common::alloc_guard::REFUSE_ABOVE_BYTES`]
//! aborts it, and tests assert that no allocation exceeded
//! [`common::alloc_guard::HUGE_BYTES`].

mod common;

use std::fs;
use std::path::Path;

use aiperf_data_prep::cifar::convert_cifar10;
use aiperf_data_prep::idx::{convert_idx_dir, decode_idx, parse_idx, IdxDataset};
use aiperf_data_prep::imagenet::{convert_imagenet, load_and_crop, ImagenetOptions, MAX_SIZE};
use aiperf_data_prep::{split_path, Header, Pack, PackWriter, PrepError, Source};
use common::alloc_guard::{assert_no_huge_allocation, AllocGuard};
use common::mutate::rewrite_pack_header;
use common::{
    assert_no_leftovers, gz, idx_bytes, jpeg, quiet, write_cifar, write_idx, write_imagenet,
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
