//! CIFAR-10 "binary version": `data_batch_1..5.bin` (train), `test_batch.bin` (val) and
//! `batches.meta.txt` (class names). Each record is one label byte followed by a 32×32 RGB
//! image stored as three 1024-byte channel planes — already the pack's CHW order. The class
//! names must be the [`CIFAR_CLASSES`] that the labels index, and every class must have
//! training samples.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{PrepError, Result};
use crate::pack::{check_targets, commit_all, split_path, Header, PackWriter, Source};

/// Side of a CIFAR image.
pub const CIFAR_SIDE: u32 = 32;
/// Bytes of one record: label + 3×32×32 pixels.
pub const CIFAR_RECORD: usize = 1 + 3 * 32 * 32;
/// Classes of CIFAR-10: labels 0..=9, one name each in `batches.meta.txt`.
pub const CIFAR_CLASSES: usize = 10;

/// Reads the class names from `batches.meta.txt` (one per non-empty line).
pub fn read_cifar_names(path: &Path) -> Result<Vec<String>> {
    let bytes = fs::read(path).map_err(|e| PrepError::io(path, e))?;
    parse_cifar_names(path, &bytes)
}

/// Parses the contents of a `batches.meta.txt` read from `path` (named in errors).
pub fn parse_cifar_names(path: &Path, bytes: &[u8]) -> Result<Vec<String>> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        PrepError::format(
            path,
            format!("not UTF-8 text ({e}); expected one class name per line"),
        )
    })?;
    let names: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    if names.is_empty() {
        return Err(PrepError::format(
            path,
            "no class names (expected one per line)",
        ));
    }
    Ok(names)
}

/// Checks that `batches.meta.txt` (at `path`) names exactly [`CIFAR_CLASSES`] classes: with
/// more, a class would have no sample; with fewer, labels would have no name.
pub fn check_cifar_names(path: &Path, names: &[String]) -> Result<()> {
    if names.len() == CIFAR_CLASSES {
        return Ok(());
    }
    Err(PrepError::format(
        path,
        format!(
            "{} class names, but CIFAR-10 has {CIFAR_CLASSES} (labels 0..={}); use the batches.meta.txt that came with these batches: one name per line, {CIFAR_CLASSES} lines",
            names.len(),
            CIFAR_CLASSES - 1
        ),
    ))
}

/// Refuses a class that none of the training batches' labels has: it would be a class that
/// cannot be learned (`meta` is named, since it lists the class).
fn check_every_class_present(meta: &Path, train: &Header) -> Result<()> {
    let Some(class) = train.class_counts.iter().position(|&c| c == 0) else {
        return Ok(());
    };
    Err(PrepError::format(
        meta,
        format!(
            "class {class} ({:?}) has no sample in data_batch_1.bin ..= data_batch_5.bin; every class listed must have training samples: use the batches.meta.txt and batches of one CIFAR-10 download",
            train.class_names[class]
        ),
    ))
}

fn require(path: PathBuf, hint: &str) -> Result<PathBuf> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(PrepError::Missing {
            path,
            hint: hint.into(),
        })
    }
}

/// Splits the contents of one CIFAR batch file read from `path` (named in errors) into
/// (image, label) records, checking the length and that every label is below `num_classes`.
pub fn batch_records<'a>(
    path: &Path,
    bytes: &'a [u8],
    num_classes: u32,
) -> Result<Vec<(&'a [u8], u32)>> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(CIFAR_RECORD) {
        let records = bytes.len().div_ceil(CIFAR_RECORD).max(1);
        return Err(PrepError::Truncated {
            path: path.into(),
            expected_bytes: (records as u64) * CIFAR_RECORD as u64,
            found_bytes: bytes.len() as u64,
        });
    }
    bytes
        .chunks_exact(CIFAR_RECORD)
        .enumerate()
        .map(|(i, record)| {
            let label = u32::from(record[0]);
            if label >= num_classes {
                return Err(PrepError::LabelOutOfRange {
                    path: path.into(),
                    index: i as u64,
                    label: label.into(),
                    num_classes: num_classes.into(),
                });
            }
            Ok((&record[1..], label))
        })
        .collect()
}

/// Appends every record of one CIFAR batch file to `writer`.
fn push_batch_file(path: &Path, writer: &mut PackWriter, num_classes: u32) -> Result<()> {
    let bytes = fs::read(path).map_err(|e| PrepError::io(path, e))?;
    for (image, label) in batch_records(path, &bytes, num_classes)? {
        writer.push(image, label, path)?;
    }
    Ok(())
}

/// Converts a CIFAR-10 binary folder into `out/train.aipk` and `out/val.aipk`. Both splits
/// are staged and replace the earlier ones together ([`commit_all`]), so a failure leaves
/// the earlier dataset as it was.
pub fn convert_cifar10(src: &Path, out: &Path) -> Result<Vec<Header>> {
    let meta = require(
        src.join("batches.meta.txt"),
        "the CIFAR-10 binary version's class-name file; is this the 'cifar-10-batches-bin' folder?",
    )?;
    let names = read_cifar_names(&meta)?;
    check_cifar_names(&meta, &names)?;
    check_targets(&[split_path(out, "train"), split_path(out, "val")])?;
    let num_classes = u32::try_from(names.len()).unwrap_or(u32::MAX);
    let train: Vec<PathBuf> = (1..=5)
        .map(|i| {
            require(
                src.join(format!("data_batch_{i}.bin")),
                "one of the five CIFAR-10 training batches",
            )
        })
        .collect::<Result<_>>()?;
    let test = vec![require(
        src.join("test_batch.bin"),
        "the CIFAR-10 test batch",
    )?];
    let mut staged = Vec::new();
    for (split, files) in [("train", train), ("val", test)] {
        let shape = [3, CIFAR_SIDE, CIFAR_SIDE];
        let mut writer = PackWriter::create(&split_path(out, split), split, shape, num_classes)?;
        for f in &files {
            push_batch_file(f, &mut writer, num_classes)?;
        }
        let pack = writer.finish_staged(
            names.clone(),
            Source {
                kind: "cifar10".into(),
                dataset: "cifar10".into(),
                inputs: files.iter().map(|f| f.display().to_string()).collect(),
                processing: "none (3x32x32)".into(),
                subset: Some(false),
            },
            0,
        )?;
        if split == "train" {
            check_every_class_present(&meta, pack.header())?;
        }
        staged.push(pack);
    }
    commit_all(staged)
}
