//! MNIST-style IDX files (Fashion-MNIST, MNIST), gzipped or not: parsing and conversion of
//! the train (`train-*`) and test (`t10k-*`) splits into packs.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{PrepError, Result};
use crate::pack::{split_path, Header, PackWriter, Source};

/// IDX type code for unsigned bytes, the only element type MNIST-style files use.
const IDX_U8: u8 = 0x08;

/// A parsed IDX array of unsigned bytes.
#[derive(Debug)]
pub struct IdxArray {
    /// The dimensions, outermost first.
    pub dims: Vec<u32>,
    /// The elements, row-major.
    pub data: Vec<u8>,
}

/// Which IDX dataset: decides the class names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdxDataset {
    /// Zalando's Fashion-MNIST.
    FashionMnist,
    /// LeCun's handwritten digits.
    Mnist,
}

impl IdxDataset {
    /// The dataset's name in pack headers.
    pub fn name(self) -> &'static str {
        match self {
            IdxDataset::FashionMnist => "fashion-mnist",
            IdxDataset::Mnist => "mnist",
        }
    }

    /// Class names, index = label (Fashion-MNIST's from its README).
    pub fn class_names(self) -> Vec<String> {
        let names: [&str; 10] = match self {
            IdxDataset::FashionMnist => [
                "T-shirt/top",
                "Trouser",
                "Pullover",
                "Dress",
                "Coat",
                "Sandal",
                "Shirt",
                "Sneaker",
                "Bag",
                "Ankle boot",
            ],
            IdxDataset::Mnist => ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"],
        };
        names.iter().map(|s| s.to_string()).collect()
    }
}

/// Reads a file, transparently un-gzipping it when it starts with the gzip magic.
pub fn read_maybe_gz(path: &Path) -> Result<Vec<u8>> {
    let raw = fs::read(path).map_err(|e| PrepError::io(path, e))?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(raw.len() * 4);
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| {
                PrepError::format(
                    path,
                    format!("broken gzip stream ({e}); re-download the file"),
                )
            })?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

/// Parses an IDX file of unsigned bytes with `want_dims` dimensions.
pub fn parse_idx(path: &Path, bytes: &[u8], want_dims: u8) -> Result<IdxArray> {
    let bad_magic = |found: &[u8]| PrepError::BadMagic {
        path: path.into(),
        format: "an IDX file of unsigned bytes",
        expected: format!("00 00 08 {want_dims:02x}"),
        found: found
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" "),
    };
    if bytes.len() < 4 {
        return Err(bad_magic(bytes));
    }
    if bytes[0] != 0 || bytes[1] != 0 || bytes[2] != IDX_U8 || bytes[3] != want_dims {
        return Err(bad_magic(&bytes[..4]));
    }
    let header_len = 4 + 4 * want_dims as usize;
    if bytes.len() < header_len {
        return Err(PrepError::Truncated {
            path: path.into(),
            expected_bytes: header_len as u64,
            found_bytes: bytes.len() as u64,
        });
    }
    let dims: Vec<u32> = bytes[4..header_len]
        .chunks_exact(4)
        .map(|d| u32::from_be_bytes(d.try_into().expect("4 bytes")))
        .collect();
    let expected = dims.iter().map(|&d| u64::from(d)).product::<u64>() + header_len as u64;
    if bytes.len() as u64 != expected {
        return Err(PrepError::Truncated {
            path: path.into(),
            expected_bytes: expected,
            found_bytes: bytes.len() as u64,
        });
    }
    Ok(IdxArray {
        dims,
        data: bytes[header_len..].to_vec(),
    })
}

/// Finds `<stem>` or `<stem>.gz` in `dir`.
fn find_idx(dir: &Path, stem: &str) -> Result<PathBuf> {
    for name in [stem.to_string(), format!("{stem}.gz")] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(PrepError::Missing {
        path: dir.join(stem),
        hint: format!("expected {stem} or {stem}.gz in {}", dir.display()),
    })
}

/// Converts one split given its image and label files; returns the written header.
pub fn convert_idx_split(
    images_path: &Path,
    labels_path: &Path,
    out: &Path,
    split: &str,
    dataset: IdxDataset,
) -> Result<Header> {
    let images = parse_idx(images_path, &read_maybe_gz(images_path)?, 3)?;
    let labels = parse_idx(labels_path, &read_maybe_gz(labels_path)?, 1)?;
    let (n, h, w) = (images.dims[0], images.dims[1], images.dims[2]);
    if n != labels.dims[0] {
        return Err(PrepError::CountMismatch {
            images: images_path.into(),
            n_images: n.into(),
            labels: labels_path.into(),
            n_labels: labels.dims[0].into(),
        });
    }
    let names = dataset.class_names();
    let num_classes = names.len() as u32;
    if let Some((i, &l)) = labels
        .data
        .iter()
        .enumerate()
        .find(|(_, &l)| u32::from(l) >= num_classes)
    {
        return Err(PrepError::LabelOutOfRange {
            path: labels_path.into(),
            index: i as u64,
            label: l.into(),
            num_classes: num_classes.into(),
        });
    }
    let mut writer = PackWriter::create(out, split, [1, h, w], num_classes)?;
    let image_bytes = (h * w) as usize;
    for (img, &label) in images.data.chunks_exact(image_bytes).zip(&labels.data) {
        writer.push(img, label.into(), images_path)?;
    }
    writer.finish(
        names,
        Source {
            kind: "idx".into(),
            dataset: dataset.name().into(),
            inputs: vec![
                images_path.display().to_string(),
                labels_path.display().to_string(),
            ],
            processing: "none (1 channel, native resolution)".into(),
        },
        0,
    )
}

/// Converts the `train-*` and `t10k-*` files in `src` into `out/train.aipk` and `out/val.aipk`.
pub fn convert_idx_dir(src: &Path, out: &Path, dataset: IdxDataset) -> Result<Vec<Header>> {
    if !src.is_dir() {
        return Err(PrepError::Missing {
            path: src.into(),
            hint: format!("a folder with the {} IDX files", dataset.name()),
        });
    }
    let mut headers = Vec::new();
    for (prefix, split) in [("train", "train"), ("t10k", "val")] {
        let images = find_idx(src, &format!("{prefix}-images-idx3-ubyte"))?;
        let labels = find_idx(src, &format!("{prefix}-labels-idx1-ubyte"))?;
        headers.push(convert_idx_split(
            &images,
            &labels,
            &split_path(out, split),
            split,
            dataset,
        )?);
    }
    Ok(headers)
}
