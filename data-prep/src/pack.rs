//! The packed dataset format (`.aipk`) that training reads: one file per split holding a
//! fixed preamble, uint8 images in N×C×H×W order, u16 labels, and a JSON header with the
//! shape, classes, counts, statistics and checksum. Written to a temporary name and renamed
//! when complete; read through a memory map for fast random access.
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

use std::fs::{self, File};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use serde::{Deserialize, Serialize};

use crate::error::{PrepError, Result};

/// The 8 magic bytes that open every packed file.
pub const MAGIC: &[u8; 8] = b"AIPERFPK";
/// The format version this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Byte offset of the image array (page aligned, so the map can be read in place).
pub const IMAGES_OFFSET: u64 = 4096;
const PREAMBLE_BYTES: usize = 32;
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
    /// Bytes of one image (C·H·W).
    pub fn image_bytes(&self) -> usize {
        self.channels as usize * self.height as usize * self.width as usize
    }
}

/// Writes one split to `<path>.tmp-<pid>`, renaming to `path` only in [`PackWriter::finish`].
/// Dropped unfinished (an error, a panic), it removes the temporary file.
pub struct PackWriter {
    path: PathBuf,
    tmp_path: PathBuf,
    out: Option<BufWriter<File>>,
    split: String,
    shape: [u32; 3],
    num_classes: u32,
    labels: Vec<u16>,
    crc: crc32fast::Hasher,
    channel_sum: Vec<u64>,
    channel_sq_sum: Vec<u64>,
}

impl PackWriter {
    /// Starts a pack of `channels`×`height`×`width` images with `num_classes` classes.
    pub fn create(
        path: &Path,
        split: &str,
        [channels, height, width]: [u32; 3],
        num_classes: u32,
    ) -> Result<Self> {
        if channels == 0 || height == 0 || width == 0 {
            return Err(PrepError::format(
                path,
                format!("image shape {channels}x{height}x{width} has a zero dimension"),
            ));
        }
        if num_classes == 0 || num_classes as usize > MAX_CLASSES {
            return Err(PrepError::format(
                path,
                format!("{num_classes} classes: must be 1..={MAX_CLASSES}"),
            ));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| PrepError::io(dir, e))?;
        }
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".tmp-{}", std::process::id()));
        let tmp_path = path.with_file_name(name);
        let file = File::create(&tmp_path).map_err(|e| PrepError::io(&tmp_path, e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&[0u8; IMAGES_OFFSET as usize])
            .map_err(|e| PrepError::io(&tmp_path, e))?;
        Ok(PackWriter {
            path: path.to_path_buf(),
            tmp_path,
            out: Some(out),
            split: split.to_string(),
            shape: [channels, height, width],
            num_classes,
            labels: Vec::new(),
            crc: crc32fast::Hasher::new(),
            channel_sum: vec![0; channels as usize],
            channel_sq_sum: vec![0; channels as usize],
        })
    }

    /// Bytes one image must have (C·H·W).
    pub fn image_bytes(&self) -> usize {
        self.shape.iter().map(|&d| d as usize).product()
    }

    /// Samples pushed so far.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether no sample has been pushed yet.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Appends one image in C×H×W order with its label. `origin` names the input in errors.
    pub fn push(&mut self, chw: &[u8], label: u32, origin: &Path) -> Result<()> {
        if chw.len() != self.image_bytes() {
            return Err(PrepError::format(
                origin,
                format!(
                    "image has {} bytes, the pack expects {} ({}x{}x{})",
                    chw.len(),
                    self.image_bytes(),
                    self.shape[0],
                    self.shape[1],
                    self.shape[2]
                ),
            ));
        }
        if label >= self.num_classes {
            return Err(PrepError::LabelOutOfRange {
                path: origin.to_path_buf(),
                index: self.labels.len() as u64,
                label: label.into(),
                num_classes: self.num_classes.into(),
            });
        }
        let plane = chw.len() / self.shape[0] as usize;
        for (c, pixels) in chw.chunks_exact(plane).enumerate() {
            let (sum, sq) = pixels.iter().fold((0u64, 0u64), |(s, q), &p| {
                let p = u64::from(p);
                (s + p, q + p * p)
            });
            self.channel_sum[c] += sum;
            self.channel_sq_sum[c] += sq;
        }
        self.crc.update(chw);
        let out = self.out.as_mut().expect("writer used after finish");
        out.write_all(chw)
            .map_err(|e| PrepError::io(&self.tmp_path, e))?;
        self.labels.push(label as u16);
        Ok(())
    }

    /// Writes labels and header, syncs, and renames the file into place. Returns the header.
    pub fn finish(
        mut self,
        class_names: Vec<String>,
        source: Source,
        skipped: u64,
    ) -> Result<Header> {
        if class_names.len() != self.num_classes as usize {
            return Err(PrepError::format(
                &self.path,
                format!(
                    "{} class names for {} classes",
                    class_names.len(),
                    self.num_classes
                ),
            ));
        }
        if self.labels.is_empty() {
            return Err(PrepError::format(
                &self.path,
                format!("no samples for the {} split; check the input", self.split),
            ));
        }
        let tmp = self.tmp_path.clone();
        let io = |e| PrepError::io(&tmp, e);
        let n = self.labels.len() as u64;
        let image_bytes = self.image_bytes() as u64;
        let labels_offset = IMAGES_OFFSET + n * image_bytes;
        let label_bytes: Vec<u8> = self.labels.iter().flat_map(|l| l.to_le_bytes()).collect();
        self.crc.update(&label_bytes);
        let mut class_counts = vec![0u64; self.num_classes as usize];
        for &l in &self.labels {
            class_counts[l as usize] += 1;
        }
        let per_channel = (n * image_bytes / u64::from(self.shape[0])) as f64;
        let channel_mean: Vec<f64> = self
            .channel_sum
            .iter()
            .map(|&s| s as f64 / per_channel / 255.0)
            .collect();
        let channel_std: Vec<f64> = self
            .channel_sq_sum
            .iter()
            .zip(&channel_mean)
            .map(|(&q, &m)| (q as f64 / per_channel / 65025.0 - m * m).max(0.0).sqrt())
            .collect();
        let header = Header {
            format: "aiperf-pack".into(),
            format_version: FORMAT_VERSION,
            split: self.split.clone(),
            num_samples: n,
            channels: self.shape[0],
            height: self.shape[1],
            width: self.shape[2],
            num_classes: self.num_classes,
            class_names,
            class_counts,
            images_offset: IMAGES_OFFSET,
            labels_offset,
            crc32: self.crc.clone().finalize(),
            pixel_sum: self.channel_sum.iter().sum(),
            channel_mean,
            channel_std,
            skipped,
            source,
            created_by: concat!("aiperf-data-prep ", env!("CARGO_PKG_VERSION")).into(),
        };
        let json = serde_json::to_vec_pretty(&header).expect("header serialises");
        let mut out = self.out.take().expect("writer used after finish");
        out.write_all(&label_bytes).map_err(io)?;
        out.write_all(&json).map_err(io)?;
        let mut preamble = [0u8; PREAMBLE_BYTES];
        preamble[..8].copy_from_slice(MAGIC);
        preamble[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        preamble[16..24].copy_from_slice(&(labels_offset + 2 * n).to_le_bytes());
        preamble[24..32].copy_from_slice(&(json.len() as u64).to_le_bytes());
        out.seek(SeekFrom::Start(0)).map_err(io)?;
        out.write_all(&preamble).map_err(io)?;
        let file = out.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        drop(file);
        fs::rename(&self.tmp_path, &self.path).map_err(|e| PrepError::io(&self.path, e))?;
        Ok(header)
    }
}

impl Drop for PackWriter {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = fs::remove_file(&self.tmp_path);
        }
    }
}

/// A packed split opened for reading through a memory map.
#[derive(Debug)]
pub struct Pack {
    path: PathBuf,
    header: Header,
    map: Mmap,
}

impl Pack {
    /// Opens and checks a packed file: magic, version, header and that the file is as long
    /// as the header says. (The checksum is checked by [`Pack::verify`], which reads it all.)
    pub fn open(path: &Path) -> Result<Pack> {
        let file = File::open(path).map_err(|e| PrepError::io(path, e))?;
        // SAFETY: the map is read-only; packs are written under a temporary name and renamed,
        // so a file that is complete is never modified in place by aiperf.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| PrepError::io(path, e))?;
        let len = map.len() as u64;
        if len < PREAMBLE_BYTES as u64 || &map[..8] != MAGIC {
            let found = map.get(..8).map_or("(file too short)".into(), |m| {
                String::from_utf8_lossy(m).escape_debug().to_string()
            });
            return Err(PrepError::BadMagic {
                path: path.into(),
                format: "an aiperf pack",
                expected: "\"AIPERFPK\"".into(),
                found,
            });
        }
        let word = |at: usize| u64::from_le_bytes(map[at..at + 8].try_into().expect("8 bytes"));
        let version = u32::from_le_bytes(map[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(PrepError::format(
                path,
                format!("pack format version {version}; this aiperf reads version {FORMAT_VERSION}: re-create it with this aiperf-data-prep"),
            ));
        }
        let (h_off, h_len) = (word(16), word(24));
        let h_end = h_off.saturating_add(h_len);
        if h_end > len || h_off < IMAGES_OFFSET {
            return Err(PrepError::Truncated {
                path: path.into(),
                expected_bytes: h_end,
                found_bytes: len,
            });
        }
        let header: Header = serde_json::from_slice(&map[h_off as usize..h_end as usize])
            .map_err(|e| PrepError::format(path, format!("unreadable pack header: {e}")))?;
        let n = header.num_samples;
        let expect_labels = header.images_offset + n * header.image_bytes() as u64;
        if header.labels_offset != expect_labels
            || header.labels_offset + 2 * n != h_off
            || header.class_names.len() != header.num_classes as usize
            || header.channels == 0
        {
            return Err(PrepError::format(
                path,
                "pack header is inconsistent with its own layout; re-create the file",
            ));
        }
        Ok(Pack {
            path: path.into(),
            header,
            map,
        })
    }

    /// The file's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.header.num_samples as usize
    }

    /// Whether the split holds no samples (never true for a pack this crate wrote).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All image bytes (N·C·H·W).
    pub fn images(&self) -> &[u8] {
        let start = self.header.images_offset as usize;
        &self.map[start..self.header.labels_offset as usize]
    }

    /// Sample `i`'s image, C×H×W. Panics if `i >= len()`.
    pub fn image(&self, i: usize) -> &[u8] {
        let b = self.header.image_bytes();
        &self.images()[i * b..(i + 1) * b]
    }

    /// All label bytes (N little-endian u16).
    pub fn label_bytes(&self) -> &[u8] {
        let start = self.header.labels_offset as usize;
        &self.map[start..start + 2 * self.len()]
    }

    /// Sample `i`'s label. Panics if `i >= len()`.
    pub fn label(&self, i: usize) -> u16 {
        let b = self.label_bytes();
        u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
    }

    /// Reads the whole file and checks the CRC-32, the pixel sum and the label range.
    pub fn verify(&self) -> Result<()> {
        let mut crc = crc32fast::Hasher::new();
        crc.update(self.images());
        crc.update(self.label_bytes());
        let crc = crc.finalize();
        if crc != self.header.crc32 {
            return Err(PrepError::format(
                &self.path,
                format!("checksum mismatch (crc32 {crc:08x}, header says {:08x}): the file is corrupt; re-create it", self.header.crc32),
            ));
        }
        let sum: u64 = self.images().iter().map(|&p| u64::from(p)).sum();
        if sum != self.header.pixel_sum {
            return Err(PrepError::format(
                &self.path,
                format!(
                    "pixel sum {sum} differs from the header's {}",
                    self.header.pixel_sum
                ),
            ));
        }
        if let Some(i) =
            (0..self.len()).find(|&i| u32::from(self.label(i)) >= self.header.num_classes)
        {
            return Err(PrepError::LabelOutOfRange {
                path: self.path.clone(),
                index: i as u64,
                label: self.label(i).into(),
                num_classes: self.header.num_classes.into(),
            });
        }
        Ok(())
    }
}

/// The conventional file name of a split inside a prepared dataset folder.
pub fn split_path(dir: &Path, split: &str) -> PathBuf {
    dir.join(format!("{split}.aipk"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> Source {
        Source {
            kind: "test".into(),
            dataset: "test".into(),
            inputs: vec![],
            processing: String::new(),
        }
    }

    fn write(path: &Path, n: usize) -> Header {
        let mut w = PackWriter::create(path, "train", [2, 3, 2], 3).unwrap();
        for i in 0..n {
            let img: Vec<u8> = (0..12).map(|p| (i * 12 + p) as u8).collect();
            w.push(&img, (i % 3) as u32, Path::new("src")).unwrap();
        }
        w.finish(vec!["a".into(), "b".into(), "c".into()], source(), 0)
            .unwrap()
    }

    #[test]
    fn round_trip_and_statistics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.aipk");
        let h = write(&path, 5);
        let p = Pack::open(&path).unwrap();
        assert_eq!(p.header(), &h);
        assert_eq!(p.len(), 5);
        assert_eq!(p.image(4), &(48..60).collect::<Vec<u8>>()[..]);
        assert_eq!(
            (0..5).map(|i| p.label(i)).collect::<Vec<_>>(),
            vec![0, 1, 2, 0, 1]
        );
        assert_eq!(h.class_counts, vec![2, 2, 1]);
        assert_eq!(h.pixel_sum, (0..60u64).sum::<u64>());
        // Channel 0 holds pixels i*12 + 0..6, channel 1 holds i*12 + 6..12.
        let ch0: Vec<f64> = (0..5)
            .flat_map(|i| (0..6).map(move |p| f64::from(i * 12 + p)))
            .collect();
        let mean0 = ch0.iter().sum::<f64>() / 30.0;
        let std0 = (ch0.iter().map(|v| (v - mean0).powi(2)).sum::<f64>() / 30.0).sqrt();
        assert!((h.channel_mean[0] - mean0 / 255.0).abs() < 1e-12);
        assert!((h.channel_std[0] - std0 / 255.0).abs() < 1e-9);
        assert!((h.channel_mean[1] - (mean0 + 6.0) / 255.0).abs() < 1e-12);
        p.verify().unwrap();
    }

    #[test]
    fn unfinished_writer_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.aipk");
        let mut w = PackWriter::create(&path, "train", [1, 1, 1], 2).unwrap();
        w.push(&[1], 0, Path::new("src")).unwrap();
        assert!(
            w.push(&[1], 2, Path::new("src")).is_err(),
            "label 2 of 2 classes"
        );
        assert!(
            w.push(&[1, 2], 0, Path::new("src")).is_err(),
            "wrong image size"
        );
        drop(w);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn corrupt_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.aipk");
        write(&path, 5);
        let good = std::fs::read(&path).unwrap();

        std::fs::write(&path, &good[..good.len() - 10]).unwrap();
        let e = Pack::open(&path).err().unwrap();
        assert!(matches!(e, PrepError::Truncated { .. }), "{e}");

        let mut bad = good.clone();
        bad[0] = b'X';
        std::fs::write(&path, &bad).unwrap();
        assert!(matches!(
            Pack::open(&path).err().unwrap(),
            PrepError::BadMagic { .. }
        ));

        let mut bad = good.clone();
        bad[8] = 9;
        std::fs::write(&path, &bad).unwrap();
        assert!(Pack::open(&path)
            .err()
            .unwrap()
            .to_string()
            .contains("version 9"));

        let mut bad = good.clone();
        bad[IMAGES_OFFSET as usize + 3] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let e = Pack::open(&path).unwrap().verify().unwrap_err();
        assert!(e.to_string().contains("checksum mismatch"), "{e}");

        std::fs::write(&path, b"hello").unwrap();
        assert!(matches!(
            Pack::open(&path).err().unwrap(),
            PrepError::BadMagic { .. }
        ));
    }
}
