//! Helpers shared by the integration tests: small datasets written in the real formats
//! (IDX, CIFAR-10 binary, JPEGs in the ImageNet layout), a seeded generator, mutation of
//! packed headers, and an allocator that records the largest allocation.
// Each test binary uses a part of these helpers.
#![allow(dead_code)]

pub mod alloc_guard;
pub mod mutate;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use aiperf_data_prep::idx::{convert_idx_dir, IdxDataset};
use aiperf_data_prep::imagenet::ImagenetOptions;
use aiperf_data_prep::split_path;

/// Deterministic pseudo-random bytes (an LCG), so tests need no RNG crate.
pub fn bytes(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

pub fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

pub fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

pub struct IdxSet {
    pub train_images: Vec<u8>,
    pub train_labels: Vec<u8>,
    pub test_images: Vec<u8>,
    pub test_labels: Vec<u8>,
}

/// Writes an IDX dataset with `n_train`/`n_test` 5×4 images; `gzip` picks the encoding.
pub fn write_idx(dir: &Path, n_train: u32, n_test: u32, gzip: bool) -> IdxSet {
    let set = IdxSet {
        train_images: bytes(n_train as usize * 20, 1),
        train_labels: bytes(n_train as usize, 2).iter().map(|b| b % 10).collect(),
        test_images: bytes(n_test as usize * 20, 3),
        test_labels: bytes(n_test as usize, 4).iter().map(|b| b % 10).collect(),
    };
    let files = [
        (
            "train-images-idx3-ubyte",
            idx_bytes(&[n_train, 5, 4], &set.train_images),
        ),
        (
            "train-labels-idx1-ubyte",
            idx_bytes(&[n_train], &set.train_labels),
        ),
        (
            "t10k-images-idx3-ubyte",
            idx_bytes(&[n_test, 5, 4], &set.test_images),
        ),
        (
            "t10k-labels-idx1-ubyte",
            idx_bytes(&[n_test], &set.test_labels),
        ),
    ];
    fs::create_dir_all(dir).unwrap();
    for (name, data) in files {
        if gzip {
            fs::write(dir.join(format!("{name}.gz")), gz(&data)).unwrap();
        } else {
            fs::write(dir.join(name), data).unwrap();
        }
    }
    set
}

/// No temporary file, partial output or backup is left in `out`.
pub fn assert_no_leftovers(out: &Path) {
    if let Ok(entries) = fs::read_dir(out) {
        let names: Vec<String> = entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| !n.contains(".tmp-") && !n.contains(".bak-")),
            "temporary files or backups left: {names:?}"
        );
    }
}

/// Writes a CIFAR-10 binary folder with `per_batch` records in each of the six files, the
/// labels counting up through the classes (so that two records per batch cover all ten in
/// the training batches).
pub fn write_cifar(dir: &Path, per_batch: usize) -> Vec<Vec<u8>> {
    fs::create_dir_all(dir).unwrap();
    let names = [
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    ];
    fs::write(dir.join("batches.meta.txt"), names.join("\n") + "\n\n").unwrap();
    let mut files = Vec::new();
    for (i, name) in [
        "data_batch_1",
        "data_batch_2",
        "data_batch_3",
        "data_batch_4",
        "data_batch_5",
        "test_batch",
    ]
    .iter()
    .enumerate()
    {
        let mut data = Vec::new();
        for r in 0..per_batch {
            data.push(((i * per_batch + r) % 10) as u8);
            data.extend(bytes(3072, (i * 1000 + r) as u32));
        }
        fs::write(dir.join(format!("{name}.bin")), &data).unwrap();
        files.push(data);
    }
    files
}

/// A `w`×`h` JPEG whose left half is dark and right half bright, in channel `tint`.
pub fn jpeg(path: &Path, w: u32, h: u32, tint: usize) {
    let img = image::RgbImage::from_fn(w, h, |x, _| {
        let v = if x < w / 2 { 30 } else { 220 };
        let mut p = [60u8; 3];
        p[tint] = v;
        image::Rgb(p)
    });
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    img.save_with_format(path, image::ImageFormat::Jpeg)
        .unwrap();
}

pub fn write_imagenet(root: &Path, flat_val: bool) {
    let wnids = ["n01440764", "n01443537", "n01484850"];
    for (c, wnid) in wnids.iter().enumerate() {
        for i in 0..3 {
            // Landscape, portrait and square images of different sizes.
            let (w, h) = [(48, 32), (30, 50), (40, 40)][i];
            jpeg(&root.join(format!("train/{wnid}/{wnid}_{i}.JPEG")), w, h, c);
        }
        if flat_val {
            jpeg(
                &root.join(format!("val/ILSVRC2012_val_0000000{c}.JPEG")),
                36,
                24,
                c,
            );
        } else {
            jpeg(&root.join(format!("val/{wnid}/v{c}.jpeg")), 36, 24, c);
        }
    }
    if flat_val {
        let csv: String = std::iter::once("ImageId,PredictionString\n".to_string())
            .chain(
                wnids
                    .iter()
                    .enumerate()
                    .map(|(c, w)| format!("ILSVRC2012_val_0000000{c},{w} 1 2 3 4\n")),
            )
            .collect();
        fs::write(root.join("LOC_val_solution.csv"), csv).unwrap();
    }
    fs::write(
        root.join("synsets.txt"),
        "n01440764 tench, Tinca tinca\nn01443537 goldfish\n",
    )
    .unwrap();
}

pub fn quiet(size: u32) -> ImagenetOptions {
    ImagenetOptions {
        size,
        progress: false,
        threads: 2,
        ..ImagenetOptions::default()
    }
}

/// The bytes of `out`'s train.aipk and val.aipk.
pub fn dataset_bytes(out: &Path) -> [Vec<u8>; 2] {
    ["train", "val"].map(|s| fs::read(split_path(out, s)).unwrap())
}

/// An earlier MNIST dataset in `<tmp>/out` converted from `<tmp>/src`, whose files are then
/// rewritten with `n_train` and `n_test` new images; returns the two folders.
pub fn earlier_dataset(tmp: &Path, n_train: u32, n_test: u32) -> (PathBuf, PathBuf) {
    let (src, out) = (tmp.join("src"), tmp.join("out"));
    write_idx(&src, 8, 4, false);
    convert_idx_dir(&src, &out, IdxDataset::Mnist).unwrap();
    fs::remove_dir_all(&src).unwrap();
    write_idx(&src, n_train, n_test, false);
    (src, out)
}

/// Runs `aiperf-data-prep mnist --src SRC --out OUT` under `sh -c 'PREFIX exec BINARY ...'`.
pub fn run_mnist(prefix: &str, src: &Path, out: &Path) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("{prefix} exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_aiperf-data-prep"))
        .arg("mnist")
        .arg("--src")
        .arg(src)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}
