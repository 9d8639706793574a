//! Reading packs: [`Pack`] maps a file and checks, before anything is sliced, that the
//! preamble and the JSON header agree with each other and with the file's length. All size
//! arithmetic on header values is checked, and a mismatch names the offending field and the
//! values involved, so a corrupt or hostile file is a clean error, never a panic.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::{Header, FORMAT_VERSION, IMAGES_OFFSET, MAGIC, MAX_CLASSES, PREAMBLE_BYTES};
use crate::error::{PrepError, Result};

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
        if path.is_dir() {
            let packs: Vec<String> = ["train.aipk", "val.aipk"]
                .iter()
                .filter(|n| path.join(n).is_file())
                .map(|n| path.join(n).display().to_string())
                .collect();
            return Err(PrepError::format(
                path,
                if packs.is_empty() {
                    "a folder, not a pack: give a .aipk file".to_string()
                } else {
                    format!(
                        "a folder, not a pack: give one of its packs, {}",
                        packs.join(" or ")
                    )
                },
            ));
        }
        let file = File::open(path).map_err(|e| PrepError::io(path, e))?;
        // SAFETY: the map is read-only; packs are written under a temporary name and renamed,
        // so a file that is complete is never modified in place by aiperf.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| PrepError::io(path, e))?;
        let (h_off, h_end) = read_preamble(path, &map)?;
        // Both lie within the map (checked by read_preamble), so they fit a usize.
        let header: Header = serde_json::from_slice(&map[h_off as usize..h_end as usize])
            .map_err(|e| PrepError::format(path, format!("unreadable pack header: {e}")))?;
        check_layout(path, &header, h_off)?;
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
        // The labels lie within the map (checked by open), so the count fits a usize.
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

    /// Reads the whole file and checks the CRC-32, the pixel sum, the label range and the
    /// per-class counts.
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
        let mut counts = vec![0u64; self.header.class_counts.len()];
        for i in 0..self.len() {
            let label = self.label(i);
            let Some(count) = counts.get_mut(usize::from(label)) else {
                return Err(PrepError::LabelOutOfRange {
                    path: self.path.clone(),
                    index: i as u64,
                    label: label.into(),
                    num_classes: self.header.num_classes.into(),
                });
            };
            *count += 1;
        }
        if counts != self.header.class_counts {
            return Err(PrepError::PackLayout {
                path: self.path.clone(),
                field: "class_counts",
                problem: format!(
                    "is {:?}, but the labels count {counts:?}",
                    self.header.class_counts
                ),
            });
        }
        Ok(())
    }
}

/// Checks magic and version; returns the JSON header's start and end, both within `map`.
fn read_preamble(path: &Path, map: &[u8]) -> Result<(u64, u64)> {
    let len = map.len() as u64;
    if map.len() < PREAMBLE_BYTES || &map[..8] != MAGIC {
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
    let layout = |field, problem| PrepError::PackLayout {
        path: path.into(),
        field,
        problem,
    };
    if h_off < IMAGES_OFFSET {
        return Err(layout(
            "header offset (preamble bytes 16..24)",
            format!("is {h_off}, inside the first {IMAGES_OFFSET} bytes that precede the images"),
        ));
    }
    let h_end = h_off.checked_add(h_len).ok_or_else(|| {
        layout(
            "header length (preamble bytes 24..32)",
            format!("is {h_len}: added to the header offset {h_off} it overflows u64"),
        )
    })?;
    if h_end > len {
        return Err(PrepError::Truncated {
            path: path.into(),
            expected_bytes: h_end,
            found_bytes: len,
        });
    }
    Ok((h_off, h_end))
}

/// The error for a header `field` with a `problem`.
fn layout_error(path: &Path, field: &'static str, problem: String) -> Result<()> {
    Err(PrepError::PackLayout {
        path: path.into(),
        field,
        problem,
    })
}

/// Checks that the header's shape, classes, counts and offsets describe the file: images at
/// [`IMAGES_OFFSET`], then `num_samples` labels, ending where the JSON header starts.
fn check_layout(path: &Path, h: &Header, h_off: u64) -> Result<()> {
    check_shape_and_classes(path, h)?;
    let bad = |field, problem| layout_error(path, field, problem);
    if h.images_offset != IMAGES_OFFSET {
        return bad(
            "images_offset",
            format!(
                "is {}, but the format puts the images at {IMAGES_OFFSET}",
                h.images_offset
            ),
        );
    }
    let Some(image_bytes) = h.checked_image_bytes() else {
        return bad(
            "channels, height, width",
            format!(
                "{}x{}x{} bytes per image overflow u64",
                h.channels, h.height, h.width
            ),
        );
    };
    let n = h.num_samples;
    let Some(labels_offset) = n
        .checked_mul(image_bytes)
        .and_then(|b| b.checked_add(IMAGES_OFFSET))
    else {
        return bad(
            "num_samples",
            format!("is {n}: {n} images of {image_bytes} bytes each overflow u64"),
        );
    };
    if h.labels_offset != labels_offset {
        return bad(
            "labels_offset",
            format!(
                "is {}, but images_offset {IMAGES_OFFSET} + num_samples {n} x {image_bytes} bytes per image = {labels_offset}",
                h.labels_offset
            ),
        );
    }
    let labels_end = n.checked_mul(2).and_then(|b| b.checked_add(labels_offset));
    if labels_end != Some(h_off) {
        let end = labels_end.map_or("beyond u64".into(), |e| format!("at byte {e}"));
        return bad(
            "num_samples",
            format!("is {n}: its labels would end {end}, but the preamble puts the JSON header at byte {h_off}"),
        );
    }
    Ok(())
}

/// Checks the image shape (no zero dimension) and the class count and per-class lists.
fn check_shape_and_classes(path: &Path, h: &Header) -> Result<()> {
    let bad = |field, problem| layout_error(path, field, problem);
    for (field, value) in [
        ("channels", h.channels),
        ("height", h.height),
        ("width", h.width),
    ] {
        if value == 0 {
            return bad(field, "is 0; images need at least one byte".into());
        }
    }
    if h.num_classes == 0 || h.num_classes as usize > MAX_CLASSES {
        return bad(
            "num_classes",
            format!("is {}, outside 1..={MAX_CLASSES}", h.num_classes),
        );
    }
    for (field, len) in [
        ("class_names", h.class_names.len()),
        ("class_counts", h.class_counts.len()),
    ] {
        if len != h.num_classes as usize {
            return bad(
                field,
                format!("has {len} entries, but num_classes is {}", h.num_classes),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::{PackWriter, Source};

    fn source() -> Source {
        Source {
            kind: "test".into(),
            dataset: "test".into(),
            inputs: vec![],
            processing: String::new(),
            subset: Some(false),
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

    #[test]
    fn header_length_overflowing_u64_names_the_preamble_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.aipk");
        write(&path, 2);
        let mut bad = std::fs::read(&path).unwrap();
        bad[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(&path, &bad).unwrap();
        let e = Pack::open(&path).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, PrepError::PackLayout { field, .. } if field.starts_with("header length")),
            "{msg}"
        );
        assert!(msg.contains(&u64::MAX.to_string()), "{msg}");
    }
}
