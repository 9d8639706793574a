//! MNIST-style IDX files (Fashion-MNIST, MNIST), gzipped or not: parsing and conversion of
//! the train (`train-*`) and test (`t10k-*`) splits into packs. Header sizes are combined
//! with checked arithmetic, a zero dimension is an error, and a gzip stream is decompressed
//! no further than its header promises, so a corrupt file is an error naming it.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{PrepError, Result};
use crate::pack::{check_targets, commit_all, split_path, Header, PackWriter, Source, StagedPack};

/// IDX type code for unsigned bytes, the only element type MNIST-style files use.
const IDX_U8: u8 = 0x08;
/// The first two bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

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

/// Reads an IDX file of unsigned bytes with `want_dims` dimensions, gzipped or not.
pub fn read_idx(path: &Path, want_dims: u8) -> Result<IdxArray> {
    let raw = fs::read(path).map_err(|e| PrepError::io(path, e))?;
    decode_idx(path, &raw, want_dims)
}

/// Decodes the bytes of an IDX file read from `path` (named in errors): un-gzips them when
/// they start with the gzip magic, decompressing no more than the IDX header promises, then
/// parses them as [`parse_idx`] does.
pub fn decode_idx(path: &Path, raw: &[u8], want_dims: u8) -> Result<IdxArray> {
    if !raw.starts_with(&GZIP_MAGIC) {
        return parse_idx(path, raw, want_dims);
    }
    let broken = |e: std::io::Error| {
        PrepError::format(
            path,
            format!("broken gzip stream ({e}); re-download the file"),
        )
    };
    let mut gz = flate2::read::MultiGzDecoder::new(raw);
    let header_len = idx_header_len(want_dims);
    let mut header = Vec::with_capacity(header_len);
    (&mut gz)
        .take(header_len as u64)
        .read_to_end(&mut header)
        .map_err(broken)?;
    let dims = parse_header(path, &header, want_dims)?;
    let data_len = idx_data_len(path, &dims)?;
    // No capacity from the header: the buffer grows only as data really arrives.
    let mut data = Vec::new();
    (&mut gz)
        .take(data_len.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(broken)?;
    let found = data.len() as u64;
    if found > data_len {
        return Err(PrepError::format(
            path,
            format!("decompressed data is longer than the {data_len} bytes its header ({dims:?}) promises; re-download the file"),
        ));
    }
    if found < data_len {
        return Err(PrepError::Truncated {
            path: path.into(),
            expected_bytes: header_len as u64 + data_len,
            found_bytes: header_len as u64 + found,
        });
    }
    Ok(IdxArray { dims, data })
}

/// Parses an uncompressed IDX file of unsigned bytes with `want_dims` dimensions. Every
/// dimension must be at least 1 and the file exactly as long as they imply.
pub fn parse_idx(path: &Path, bytes: &[u8], want_dims: u8) -> Result<IdxArray> {
    let dims = parse_header(path, bytes, want_dims)?;
    let header_len = idx_header_len(want_dims);
    let expected = idx_data_len(path, &dims)?.checked_add(header_len as u64);
    if expected != Some(bytes.len() as u64) {
        return Err(PrepError::Truncated {
            path: path.into(),
            expected_bytes: expected.unwrap_or(u64::MAX),
            found_bytes: bytes.len() as u64,
        });
    }
    Ok(IdxArray {
        dims,
        data: bytes[header_len..].to_vec(),
    })
}

/// Bytes of an IDX header with `dims` dimensions: magic and one u32 per dimension.
fn idx_header_len(dims: u8) -> usize {
    4 + 4 * usize::from(dims)
}

/// What dimension `i` of a `want_dims`-dimensional MNIST-style file counts, for errors.
fn dim_name(want_dims: u8, i: usize) -> &'static str {
    match (want_dims, i) {
        (1, 0) => "number of labels",
        (3, 0) => "number of images",
        (3, 1) => "rows",
        (3, 2) => "columns",
        _ => "size",
    }
}

/// Checks the magic number and reads the dimensions, rejecting a zero dimension.
fn parse_header(path: &Path, bytes: &[u8], want_dims: u8) -> Result<Vec<u32>> {
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
    let header_len = idx_header_len(want_dims);
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
    if let Some(i) = dims.iter().position(|&d| d == 0) {
        return Err(PrepError::format(
            path,
            format!(
                "IDX dimension {i} ({}) is 0 (dimensions {dims:?}): the file holds no data; re-download it",
                dim_name(want_dims, i)
            ),
        ));
    }
    Ok(dims)
}

/// Bytes of data the dimensions imply, with overflow reported as an error.
fn idx_data_len(path: &Path, dims: &[u32]) -> Result<u64> {
    dims.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(u64::from(d)))
        .ok_or_else(|| {
            PrepError::format(
                path,
                format!("IDX dimensions {dims:?} imply more than 2^64 bytes: the header is corrupt; re-download the file"),
            )
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

/// One split's images and labels, checked against each other: as many labels as images,
/// every label a valid class.
#[derive(Debug)]
pub struct IdxSplit {
    shape: [u32; 3],
    image_bytes: usize,
    images: Vec<u8>,
    labels: Vec<u8>,
}

impl IdxSplit {
    /// Pairs an image array (N×H×W) with a label array (N) read from `images_path` and
    /// `labels_path` (named in errors); labels must be below `num_classes`.
    pub fn new(
        images_path: &Path,
        images: IdxArray,
        labels_path: &Path,
        labels: IdxArray,
        num_classes: u32,
    ) -> Result<IdxSplit> {
        let (&[n, h, w], &[n_labels]) = (&images.dims[..], &labels.dims[..]) else {
            return Err(PrepError::format(
                images_path,
                format!(
                    "expected 3 image dimensions and 1 label dimension, found {:?} and {:?} (in {})",
                    images.dims,
                    labels.dims,
                    labels_path.display()
                ),
            ));
        };
        if n != n_labels {
            return Err(PrepError::CountMismatch {
                images: images_path.into(),
                n_images: n.into(),
                labels: labels_path.into(),
                n_labels: n_labels.into(),
            });
        }
        let image_bytes = u64::from(h) * u64::from(w);
        let expected = image_bytes.checked_mul(n.into());
        if image_bytes == 0
            || expected != Some(images.data.len() as u64)
            || labels.data.len() as u64 != u64::from(n)
        {
            return Err(PrepError::format(
                images_path,
                format!(
                    "{} image bytes and {} labels do not fit the dimensions {:?}",
                    images.data.len(),
                    labels.data.len(),
                    images.dims
                ),
            ));
        }
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
        Ok(IdxSplit {
            shape: [1, h, w],
            // Non-zero and at most the data's length, which is a usize.
            image_bytes: image_bytes as usize,
            images: images.data,
            labels: labels.data,
        })
    }

    /// The image shape C×H×W (C = 1).
    pub fn shape(&self) -> [u32; 3] {
        self.shape
    }

    /// Number of samples (never 0: [`parse_idx`] rejects empty files).
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Each image (H×W bytes) with its label, in file order.
    pub fn samples(&self) -> impl Iterator<Item = (&[u8], u8)> + '_ {
        self.images
            .chunks_exact(self.image_bytes)
            .zip(self.labels.iter().copied())
    }
}

/// Reads and pairs one split's image and label files.
fn load_idx_split(images_path: &Path, labels_path: &Path, dataset: IdxDataset) -> Result<IdxSplit> {
    IdxSplit::new(
        images_path,
        read_idx(images_path, 3)?,
        labels_path,
        read_idx(labels_path, 1)?,
        dataset.class_names().len() as u32,
    )
}

/// Packs one split into a staged pack (see [`StagedPack`]).
fn stage_idx_split(
    data: &IdxSplit,
    images_path: &Path,
    labels_path: &Path,
    out: &Path,
    split: &str,
    dataset: IdxDataset,
) -> Result<StagedPack> {
    let names = dataset.class_names();
    let num_classes = names.len() as u32;
    let mut writer = PackWriter::create(out, split, data.shape(), num_classes)?;
    for (img, label) in data.samples() {
        writer.push(img, label.into(), images_path)?;
    }
    writer.finish_staged(
        names,
        Source {
            kind: "idx".into(),
            dataset: dataset.name().into(),
            inputs: vec![
                images_path.display().to_string(),
                labels_path.display().to_string(),
            ],
            processing: "none (1 channel, native resolution)".into(),
            subset: Some(false),
        },
        0,
    )
}

/// Refuses validation images whose shape differs from the training images': a model
/// trained on one shape cannot be validated on another.
fn check_same_shape(train: (&Path, [u32; 3]), val: (&Path, [u32; 3])) -> Result<()> {
    let ((train_path, [_, th, tw]), (val_path, [_, vh, vw])) = (train, val);
    if (th, tw) == (vh, vw) {
        return Ok(());
    }
    Err(PrepError::format(
        val_path,
        format!(
            "validation images are {vh}x{vw} but the training images in {} are {th}x{tw}; both splits must have one shape: use the train-* and t10k-* files of one dataset",
            train_path.display()
        ),
    ))
}

/// Converts the `train-*` and `t10k-*` files in `src` into `out/train.aipk` and `out/val.aipk`.
/// Both splits must have the same image shape. Both are staged and replace the earlier ones
/// together ([`commit_all`]), so a failure leaves the earlier dataset as it was.
pub fn convert_idx_dir(src: &Path, out: &Path, dataset: IdxDataset) -> Result<Vec<Header>> {
    if !src.is_dir() {
        return Err(PrepError::Missing {
            path: src.into(),
            hint: format!("a folder with the {} IDX files", dataset.name()),
        });
    }
    let targets = [split_path(out, "train"), split_path(out, "val")];
    check_targets(&targets)?;
    let mut inputs = Vec::new();
    for (prefix, split) in [("train", "train"), ("t10k", "val")] {
        let images = find_idx(src, &format!("{prefix}-images-idx3-ubyte"))?;
        let labels = find_idx(src, &format!("{prefix}-labels-idx1-ubyte"))?;
        inputs.push((images, labels, split));
    }
    let mut staged: Vec<StagedPack> = Vec::new();
    for ((images, labels, split), target) in inputs.iter().zip(&targets) {
        let data = load_idx_split(images, labels, dataset)?;
        if let (Some(train), Some((train_images, ..))) = (staged.first(), inputs.first()) {
            let h = train.header();
            let train_shape = [h.channels, h.height, h.width];
            check_same_shape((train_images, train_shape), (images, data.shape()))?;
        }
        staged.push(stage_idx_split(
            &data, images, labels, target, split, dataset,
        )?);
    }
    commit_all(staged)
}
