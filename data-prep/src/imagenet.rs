//! ImageNet (ILSVRC-2012) folder layout: `train/<wnid>/*.JPEG` for training; validation
//! either as `val/<wnid>/*.JPEG` or as flat `val/*.JPEG` with a labels file. Every image is
//! decoded, resized so its shorter side is `size` and centre-cropped to `size`×`size`, on a
//! rayon pool, in chunks so memory stays bounded, with a progress bar.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use image::imageops::FilterType;
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use crate::error::{PrepError, Result};
use crate::pack::{split_path, Header, PackWriter, Source};

/// Options of the ImageNet conversion.
#[derive(Clone, Debug)]
pub struct ImagenetOptions {
    /// Output side length in pixels.
    pub size: u32,
    /// Skip undecodable JPEGs (counted and reported) instead of failing.
    pub skip_bad: bool,
    /// Flat validation folder's labels: lines `<image name> <wnid>` (space or comma separated).
    pub val_labels: Option<PathBuf>,
    /// Optional `<wnid> <name>` lines (e.g. `LOC_synset_mapping.txt`) for readable class names.
    pub synsets: Option<PathBuf>,
    /// Keep at most this many images per class and split (for small subsets).
    pub limit_per_class: Option<usize>,
    /// Threads of the decoding pool (0 = rayon's default).
    pub threads: usize,
    /// Show a progress bar on stderr (hidden automatically when it is not a terminal).
    pub progress: bool,
}

impl Default for ImagenetOptions {
    fn default() -> Self {
        ImagenetOptions {
            size: 224,
            skip_bad: false,
            val_labels: None,
            synsets: None,
            limit_per_class: None,
            threads: 0,
            progress: true,
        }
    }
}

/// Images decoded per chunk: enough to keep every thread busy, little enough to bound memory.
const CHUNK: usize = 512;

fn is_jpeg(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("jpeg") || e.eq_ignore_ascii_case("jpg"))
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut entries = fs::read_dir(dir)
        .map_err(|e| PrepError::io(dir, e))?
        .map(|e| e.map(|e| e.path()).map_err(|err| PrepError::io(dir, err)))
        .collect::<Result<Vec<_>>>()?;
    entries.sort();
    Ok(entries)
}

/// The JPEGs of each class folder under `dir`, classes in sorted order.
fn class_folders(dir: &Path, limit: Option<usize>) -> Result<BTreeMap<String, Vec<PathBuf>>> {
    let mut classes = BTreeMap::new();
    for sub in sorted_entries(dir)?.into_iter().filter(|p| p.is_dir()) {
        let wnid = sub
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let mut files: Vec<PathBuf> = sorted_entries(&sub)?
            .into_iter()
            .filter(|p| is_jpeg(p))
            .collect();
        if let Some(l) = limit {
            files.truncate(l);
        }
        classes.insert(wnid, files);
    }
    Ok(classes)
}

/// Reads `<image> <wnid>` lines. Accepts Kaggle's `LOC_val_solution.csv` (header line, the
/// wnid as the first word of the second column) and plain two-column text.
pub fn read_val_labels(path: &Path) -> Result<BTreeMap<String, String>> {
    let text = fs::read_to_string(path).map_err(|e| PrepError::io(path, e))?;
    let mut labels = BTreeMap::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || (no == 0 && line.starts_with("ImageId")) {
            continue;
        }
        let mut fields = line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|f| !f.is_empty());
        let (Some(image), Some(wnid)) = (fields.next(), fields.next()) else {
            return Err(PrepError::format(
                path,
                format!("line {}: expected '<image> <wnid>', found {line:?}", no + 1),
            ));
        };
        let stem = Path::new(image)
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        labels.insert(stem, wnid.to_string());
    }
    Ok(labels)
}

/// Reads `<wnid> <readable name>` lines into a map.
fn read_synsets(path: &Path) -> Result<BTreeMap<String, String>> {
    let text = fs::read_to_string(path).map_err(|e| PrepError::io(path, e))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (wnid, name) = l.trim().split_once(char::is_whitespace)?;
            Some((wnid.to_string(), name.trim().to_string()))
        })
        .collect())
}

/// Decodes a JPEG, resizes its shorter side to `size` and centre-crops `size`×`size`;
/// returns RGB in C×H×W order.
pub fn load_and_crop(path: &Path, size: u32) -> Result<Vec<u8>> {
    let bytes = fs::read(path).map_err(|e| PrepError::io(path, e))?;
    let img = image::load_from_memory_with_format(&bytes, image::ImageFormat::Jpeg)
        .map_err(|e| PrepError::BadJpeg {
            path: path.into(),
            reason: e.to_string(),
        })?
        .to_rgb8();
    let (w, h) = img.dimensions();
    if w == 0 || h == 0 {
        return Err(PrepError::BadJpeg {
            path: path.into(),
            reason: "empty image".into(),
        });
    }
    // Shorter side to `size`, the other rounded, never below `size`.
    let (nw, nh) = if w <= h {
        (
            size,
            ((u64::from(h) * u64::from(size) + u64::from(w) / 2) / u64::from(w)).max(size.into())
                as u32,
        )
    } else {
        (
            ((u64::from(w) * u64::from(size) + u64::from(h) / 2) / u64::from(h)).max(size.into())
                as u32,
            size,
        )
    };
    let resized = if (nw, nh) == (w, h) {
        img
    } else {
        image::imageops::resize(&img, nw, nh, FilterType::Triangle)
    };
    let (x0, y0) = ((nw - size) / 2, (nh - size) / 2);
    let s = size as usize;
    let mut chw = vec![0u8; 3 * s * s];
    for y in 0..s {
        for x in 0..s {
            let p = resized.get_pixel(x0 + x as u32, y0 + y as u32).0;
            for c in 0..3 {
                chw[c * s * s + y * s + x] = p[c];
            }
        }
    }
    Ok(chw)
}

/// Decodes `items` in parallel chunks into a new pack at `out`.
fn write_split(
    out: &Path,
    split: &str,
    items: &[(PathBuf, u32)],
    names: Vec<String>,
    opts: &ImagenetOptions,
    inputs: Vec<String>,
) -> Result<Header> {
    let num_classes = names.len() as u32;
    let mut writer = PackWriter::create(out, split, [3, opts.size, opts.size], num_classes)?;
    let bar = if opts.progress {
        ProgressBar::new(items.len() as u64).with_style(
            ProgressStyle::with_template(
                "{prefix:>5} [{bar:40}] {pos}/{len} images, {per_sec}, eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        )
    } else {
        ProgressBar::hidden()
    };
    bar.set_prefix(split.to_string());
    let mut skipped = 0u64;
    for chunk in items.chunks(CHUNK) {
        let decoded: Vec<Result<Vec<u8>>> = chunk
            .par_iter()
            .map(|(path, _)| {
                let r = load_and_crop(path, opts.size);
                bar.inc(1);
                r
            })
            .collect();
        for ((path, label), result) in chunk.iter().zip(decoded) {
            match result {
                Ok(chw) => writer.push(&chw, *label, path)?,
                Err(e @ PrepError::BadJpeg { .. }) if opts.skip_bad => {
                    log::warn!("skipping {e}");
                    skipped += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
    bar.finish_and_clear();
    if skipped > 0 {
        log::warn!(
            "{split}: skipped {skipped} unreadable JPEG(s) of {}",
            items.len()
        );
    }
    writer.finish(
        names,
        Source {
            kind: "imagenet".into(),
            dataset: "imagenet".into(),
            inputs,
            processing: format!(
                "decode JPEG to RGB, resize shorter side to {s} (triangle filter), centre crop {s}x{s}",
                s = opts.size
            ),
        },
        skipped,
    )
}

/// Converts an ImageNet-layout folder into `out/train.aipk` and `out/val.aipk`.
pub fn convert_imagenet(src: &Path, out: &Path, opts: &ImagenetOptions) -> Result<Vec<Header>> {
    if opts.size == 0 {
        return Err(PrepError::format(src, "--size must be at least 1"));
    }
    let train_dir = src.join("train");
    let val_dir = src.join("val");
    for (dir, what) in [
        (&train_dir, "train/<wnid>/*.JPEG"),
        (&val_dir, "val/ (class folders or images + --val-labels)"),
    ] {
        if !dir.is_dir() {
            return Err(PrepError::Missing {
                path: dir.clone(),
                hint: format!("the ImageNet layout needs {what}"),
            });
        }
    }
    let train = class_folders(&train_dir, opts.limit_per_class)?;
    if train.is_empty() {
        return Err(PrepError::format(
            &train_dir,
            "no class folders (expected train/<wnid>/*.JPEG)",
        ));
    }
    let wnids: Vec<String> = train.keys().cloned().collect();
    let index: BTreeMap<&str, u32> = wnids
        .iter()
        .enumerate()
        .map(|(i, w)| (w.as_str(), i as u32))
        .collect();
    let train_items: Vec<(PathBuf, u32)> = train
        .iter()
        .flat_map(|(w, files)| files.iter().map(|f| (f.clone(), index[w.as_str()])))
        .collect();

    let val_items = val_items(&val_dir, &index, opts)?;
    let names = match &opts.synsets {
        Some(p) => {
            let map = read_synsets(p)?;
            wnids
                .iter()
                .map(|w| map.get(w).cloned().unwrap_or_else(|| w.clone()))
                .collect()
        }
        None => wnids.clone(),
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| PrepError::format(src, format!("cannot start the decoding pool: {e}")))?;
    let mut inputs = vec![
        train_dir.display().to_string(),
        val_dir.display().to_string(),
    ];
    inputs.extend(opts.val_labels.iter().map(|p| p.display().to_string()));
    pool.install(|| {
        Ok(vec![
            write_split(
                &split_path(out, "train"),
                "train",
                &train_items,
                names.clone(),
                opts,
                inputs.clone(),
            )?,
            write_split(
                &split_path(out, "val"),
                "val",
                &val_items,
                names,
                opts,
                inputs,
            )?,
        ])
    })
}

/// Validation images with labels: from class folders, or a flat folder plus a labels file.
fn val_items(
    val_dir: &Path,
    index: &BTreeMap<&str, u32>,
    opts: &ImagenetOptions,
) -> Result<Vec<(PathBuf, u32)>> {
    let entries = sorted_entries(val_dir)?;
    if entries.iter().any(|p| p.is_dir()) {
        let mut items = Vec::new();
        for (wnid, files) in class_folders(val_dir, opts.limit_per_class)? {
            let Some(&label) = index.get(wnid.as_str()) else {
                return Err(PrepError::format(
                    val_dir.join(&wnid),
                    "validation class folder has no training counterpart in train/",
                ));
            };
            items.extend(files.into_iter().map(|f| (f, label)));
        }
        return Ok(items);
    }
    let Some(labels_path) = &opts.val_labels else {
        return Err(PrepError::Missing {
            path: val_dir.join("<labels>"),
            hint: "val/ holds images without class folders: pass --val-labels FILE with '<image> <wnid>' lines".into(),
        });
    };
    let labels = read_val_labels(labels_path)?;
    let images: Vec<PathBuf> = entries.into_iter().filter(|p| is_jpeg(p)).collect();
    let mut per_class: BTreeMap<u32, usize> = BTreeMap::new();
    let mut items = Vec::new();
    for img in images.iter() {
        let stem = img.file_stem().unwrap_or_default().to_string_lossy();
        let Some(wnid) = labels.get(stem.as_ref()) else {
            return Err(PrepError::format(
                labels_path,
                format!("no label for validation image {}", img.display()),
            ));
        };
        let Some(&label) = index.get(wnid.as_str()) else {
            return Err(PrepError::format(
                labels_path,
                format!(
                    "image {stem}: class {wnid:?} is not one of the {} folders in train/",
                    index.len()
                ),
            ));
        };
        let count = per_class.entry(label).or_default();
        if opts.limit_per_class.is_none_or(|l| *count < l) {
            *count += 1;
            items.push((img.clone(), label));
        }
    }
    if labels.len() != images.len() {
        return Err(PrepError::CountMismatch {
            images: val_dir.into(),
            n_images: images.len() as u64,
            labels: labels_path.clone(),
            n_labels: labels.len() as u64,
        });
    }
    Ok(items)
}
