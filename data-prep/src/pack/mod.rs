//! The packed dataset format (`.aipk`) that training reads: one file per split holding a
//! fixed preamble, uint8 images in N×C×H×W order, u16 labels, and a JSON header with the
//! shape, classes, counts, statistics and checksum. Written to a temporary name beside the
//! target ([`mod@write`]) and put into place, every split of a dataset together and all or
//! nothing, only when complete ([`commit`]); read through a memory map for fast random
//! access ([`read`]).
//!
//! Layout (little-endian), documented for other readers in `data-prep/README.md`:
//!
//! ```text
//! 0      8 bytes  magic "AIPERFPK"
//! 8      u32      format version (1)
//! 12     u32      reserved (0)
//! 16     u64      header offset (bytes from the file start)
//! 24     u64      header length (bytes of UTF-8 JSON)
//! 32..4096        zero
//! 4096   N·C·H·W  images, u8, sample-major, channel planes (CHW) within a sample
//! ...    N·2      labels, u16
//! ...             header JSON (see [`Header`])
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod commit;
pub mod read;
pub mod write;

pub use commit::{check_targets, commit_all, StagedPack};
pub use read::Pack;
pub use write::PackWriter;

/// The 8 magic bytes that open every packed file.
pub const MAGIC: &[u8; 8] = b"AIPERFPK";
/// The format version this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Byte offset of the image array (page aligned, so the map can be read in place).
pub const IMAGES_OFFSET: u64 = 4096;
/// Bytes of the fixed preamble (magic, version, header offset and length).
pub const PREAMBLE_BYTES: usize = 32;
/// Largest class count a u16 label can hold.
pub const MAX_CLASSES: usize = u16::MAX as usize + 1;

/// Where a packed file's samples came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// The converter: `idx`, `cifar10` or `imagenet`.
    pub kind: String,
    /// The dataset's name (e.g. `fashion-mnist`).
    pub dataset: String,
    /// The input files or folders, as given.
    pub inputs: Vec<String>,
    /// Processing applied (e.g. "resize shorter side to 256, centre crop 256x256").
    pub processing: String,
    /// Whether only part of the source was kept (`--limit-per-class`); `None` in packs
    /// written before this was recorded. The scoring rules read it: a subset is not the
    /// official dataset.
    #[serde(default)]
    pub subset: Option<bool>,
}

/// The JSON header of a packed file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always `aiperf-pack`.
    pub format: String,
    /// The format version, [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The split: `train` or `val`.
    pub split: String,
    /// Number of samples N.
    pub num_samples: u64,
    /// Channels C per image.
    pub channels: u32,
    /// Image height H in pixels.
    pub height: u32,
    /// Image width W in pixels.
    pub width: u32,
    /// Number of classes; every label is below it.
    pub num_classes: u32,
    /// Class names, index = label.
    pub class_names: Vec<String>,
    /// Samples per class, index = label.
    pub class_counts: Vec<u64>,
    /// Byte offset of the images (N·C·H·W u8).
    pub images_offset: u64,
    /// Byte offset of the labels (N u16, little-endian).
    pub labels_offset: u64,
    /// CRC-32 (IEEE) of the image bytes followed by the label bytes.
    pub crc32: u32,
    /// Sum of all image bytes, a checksum that is easy to recompute anywhere.
    pub pixel_sum: u64,
    /// Per-channel mean of the pixels, scaled to [0, 1].
    pub channel_mean: Vec<f64>,
    /// Per-channel standard deviation of the pixels, scaled to [0, 1].
    pub channel_std: Vec<f64>,
    /// Inputs skipped as unreadable (only with `--skip-bad`).
    pub skipped: u64,
    /// Where the samples came from.
    pub source: Source,
    /// The program that wrote the file.
    pub created_by: String,
}

impl Header {
    /// Bytes of one image (C·H·W). Exact for every header [`Pack::open`] accepts; saturates
    /// at `usize::MAX` for a shape no file could hold (see [`Header::checked_image_bytes`]).
    pub fn image_bytes(&self) -> usize {
        self.checked_image_bytes()
            .and_then(|b| usize::try_from(b).ok())
            .unwrap_or(usize::MAX)
    }

    /// Bytes of one image (C·H·W), or `None` if the product overflows u64.
    pub fn checked_image_bytes(&self) -> Option<u64> {
        u64::from(self.channels)
            .checked_mul(u64::from(self.height))?
            .checked_mul(u64::from(self.width))
    }
}

/// The conventional file name of a split inside a prepared dataset folder.
pub fn split_path(dir: &Path, split: &str) -> PathBuf {
    dir.join(format!("{split}.aipk"))
}
