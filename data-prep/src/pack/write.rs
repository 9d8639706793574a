//! Writing packs: [`PackWriter`] streams one split into a temporary file beside its target;
//! finishing it yields a [`StagedPack`], complete and synced but still under its temporary
//! name, which [`StagedPack::commit`] puts into place. A converter that writes several
//! splits stages them all and replaces them together with
//! [`commit_all`](super::commit_all): a failure in any split, or in replacing any target,
//! leaves the earlier dataset as it was.

use std::fs::{self, File};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::commit::StagedPack;
use super::{Header, Source, FORMAT_VERSION, IMAGES_OFFSET, MAGIC, MAX_CLASSES, PREAMBLE_BYTES};
use crate::error::{PrepError, Result};

/// Writes one split to `<path>.tmp-<pid>`, renaming to `path` only when committed (see
/// [`PackWriter::finish`] and [`PackWriter::finish_staged`]). Dropped unfinished (an error, a
/// panic), it removes the temporary file.
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
        let image_bytes = u64::from(channels) * u64::from(height) * u64::from(width);
        if usize::try_from(image_bytes).is_err() {
            return Err(PrepError::format(
                path,
                format!("image shape {channels}x{height}x{width} is too large for this machine"),
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
            .map_err(|e| write_failed(&tmp_path, e))?;
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
            .map_err(|e| write_failed(&self.tmp_path, e))?;
        // Below num_classes <= MAX_CLASSES, so it fits a u16.
        self.labels.push(label as u16);
        Ok(())
    }

    /// Writes labels and header, syncs, and renames the file into place. Returns the header.
    pub fn finish(self, class_names: Vec<String>, source: Source, skipped: u64) -> Result<Header> {
        self.finish_staged(class_names, source, skipped)?.commit()
    }

    /// Writes labels and header and syncs the file, but leaves it under its temporary name:
    /// the returned [`StagedPack`] renames it into place when committed, and removes it when
    /// dropped uncommitted.
    pub fn finish_staged(
        mut self,
        class_names: Vec<String>,
        source: Source,
        skipped: u64,
    ) -> Result<StagedPack> {
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
        let label_bytes: Vec<u8> = self.labels.iter().flat_map(|l| l.to_le_bytes()).collect();
        self.crc.update(&label_bytes);
        let header = self.header(class_names, source, skipped);
        let tmp = self.tmp_path.clone();
        let io = |e| write_failed(&tmp, e);
        let json = serde_json::to_vec_pretty(&header).expect("header serialises");
        let mut preamble = [0u8; PREAMBLE_BYTES];
        preamble[..8].copy_from_slice(MAGIC);
        preamble[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        let header_offset = header.labels_offset + label_bytes.len() as u64;
        preamble[16..24].copy_from_slice(&header_offset.to_le_bytes());
        preamble[24..32].copy_from_slice(&(json.len() as u64).to_le_bytes());
        // From here on the temporary file belongs to the staged pack, which removes it if a
        // write below fails.
        let mut out = self.out.take().expect("writer used after finish");
        let staged = StagedPack::new(
            self.path.clone(),
            self.tmp_path.clone(),
            header_offset + json.len() as u64,
            header,
        );
        out.write_all(&label_bytes).map_err(io)?;
        out.write_all(&json).map_err(io)?;
        out.seek(SeekFrom::Start(0)).map_err(io)?;
        out.write_all(&preamble).map_err(io)?;
        let file = out.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        Ok(staged)
    }

    /// The header of the samples pushed so far (the label CRC already added).
    fn header(&self, class_names: Vec<String>, source: Source, skipped: u64) -> Header {
        let n = self.labels.len() as u64;
        let image_bytes = self.image_bytes() as u64;
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
        Header {
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
            labels_offset: IMAGES_OFFSET + n * image_bytes,
            crc32: self.crc.clone().finalize(),
            pixel_sum: self.channel_sum.iter().sum(),
            channel_mean,
            channel_std,
            skipped,
            source,
            created_by: concat!("aiperf-data-prep ", env!("CARGO_PKG_VERSION")).into(),
        }
    }
}

impl Drop for PackWriter {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = fs::remove_file(&self.tmp_path);
        }
    }
}

/// A failed write of the temporary file `tmp` (a full disk, a file size limit): the earlier
/// dataset is untouched, and the temporary file is removed when the writer is dropped.
fn write_failed(tmp: &Path, e: std::io::Error) -> PrepError {
    PrepError::format(
        tmp,
        format!("writing the new pack failed ({e}); the earlier dataset was left as it was: free disk space (or raise the file size limit) and run again"),
    )
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
            subset: Some(false),
        }
    }

    fn stage(path: &Path) -> StagedPack {
        let mut w = PackWriter::create(path, "train", [1, 1, 2], 1).unwrap();
        w.push(&[1, 2], 0, Path::new("src")).unwrap();
        w.finish_staged(vec!["a".into()], source(), 0).unwrap()
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
    fn staged_pack_appears_only_when_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.aipk");
        let staged = stage(&path);
        assert!(!path.exists());
        assert_eq!(staged.header().num_samples, 1);
        drop(staged);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

        let header = stage(&path).commit().unwrap();
        assert_eq!(header.num_samples, 1);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        crate::Pack::open(&path).unwrap().verify().unwrap();
    }
}
