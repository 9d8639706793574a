//! ImageNet (ILSVRC-2012) folder layout: `train/<wnid>/*.JPEG` for training; validation
//! either as `val/<wnid>/*.JPEG` or as flat `val/*.JPEG` with a labels file. Every image is
//! decoded, resized so its shorter side is `size` and centre-cropped to `size`×`size`, on a
//! rayon pool, in chunks so memory stays bounded, with a progress bar. Decoding one image,
//! with bounded memory and damaged files refused, is [`jpeg`]'s; the label files are
//! [`labels`]'.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use crate::error::{PrepError, Result};
use crate::pack::{check_targets, commit_all, split_path, Header, PackWriter, Source, StagedPack};

pub mod jpeg;
pub mod labels;

pub use jpeg::{load_and_crop, MAX_ASPECT, MAX_JPEG_FILE_BYTES, MAX_SIZE, MAX_SOURCE_PIXELS};
pub use labels::read_val_labels;

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

/// The most decoding threads `--threads` may ask for.
pub const MAX_THREADS: usize = 1024;

/// Images decoded per chunk: enough to keep every thread busy, little enough to bound memory.
const CHUNK: usize = 512;
/// Bytes of decoded output held per chunk, at most (unless one image per thread exceeds it).
const CHUNK_BYTES: usize = 256 << 20;

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

/// The JPEGs of each class folder under `dir`, classes in sorted order. A class folder
/// without JPEGs is an error: it would be a class that no sample has.
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
        if files.is_empty() {
            return Err(PrepError::format(
                &sub,
                "class folder holds no .JPEG/.jpg images: every folder here is a class, so add its images or remove the folder",
            ));
        }
        if let Some(l) = limit {
            files.truncate(l);
        }
        classes.insert(wnid, files);
    }
    Ok(classes)
}

/// A progress bar for `len` images of `split`, or a hidden one.
fn progress_bar(split: &str, len: usize, shown: bool) -> ProgressBar {
    let bar = if shown {
        ProgressBar::new(len as u64).with_style(
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
    bar
}

/// Images per decoded chunk for `size`: at most [`CHUNK`] and about [`CHUNK_BYTES`] of
/// output, but at least one per thread.
fn chunk_len(size: u32) -> usize {
    let image_bytes = 3 * (size as usize).pow(2);
    (CHUNK_BYTES / image_bytes.max(1))
        .min(CHUNK)
        .max(rayon::current_num_threads())
        .max(1)
}

/// Decodes `items` in parallel chunks into a new pack staged at `out`.
fn stage_split(
    out: &Path,
    split: &str,
    items: &[(PathBuf, u32)],
    names: Vec<String>,
    opts: &ImagenetOptions,
    inputs: Vec<String>,
) -> Result<StagedPack> {
    let num_classes = names.len() as u32;
    let mut writer = PackWriter::create(out, split, [3, opts.size, opts.size], num_classes)?;
    let bar = progress_bar(split, items.len(), opts.progress);
    let mut skipped = 0u64;
    for chunk in items.chunks(chunk_len(opts.size)) {
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
                Err(e) if opts.skip_bad && e.is_per_file() => {
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
            "{split}: skipped {skipped} unusable JPEG(s) of {}",
            items.len()
        );
    }
    writer.finish_staged(
        names,
        Source {
            kind: "imagenet".into(),
            dataset: "imagenet".into(),
            inputs,
            processing: format!(
                "decode JPEG to RGB, centre crop to at most {MAX_ASPECT}:1, resize shorter side to {s} (triangle filter), centre crop {s}x{s}",
                s = opts.size
            ),
            subset: Some(opts.limit_per_class.is_some()),
        },
        skipped,
    )
}

/// Checks the options that need no I/O.
fn check_options(src: &Path, opts: &ImagenetOptions) -> Result<()> {
    if opts.size == 0 || opts.size > MAX_SIZE {
        return Err(PrepError::format(
            src,
            format!("--size {} is outside 1..={MAX_SIZE}", opts.size),
        ));
    }
    if opts.limit_per_class == Some(0) {
        return Err(PrepError::format(
            src,
            "--limit-per-class 0 would keep no images; give at least 1",
        ));
    }
    if opts.threads > MAX_THREADS {
        return Err(PrepError::format(
            src,
            format!(
                "--threads {} is more than {MAX_THREADS}; give at most {MAX_THREADS}, or 0 for one per core",
                opts.threads
            ),
        ));
    }
    for (flag, file) in [
        ("--val-labels", &opts.val_labels),
        ("--synsets", &opts.synsets),
    ] {
        if let Some(f) = file.as_ref().filter(|f| !f.is_file()) {
            return Err(PrepError::Missing {
                path: f.clone(),
                hint: format!("{flag} names no file: give an existing one, or leave {flag} out"),
            });
        }
    }
    Ok(())
}

/// A class whose training images were all skipped as unusable: an error naming its folder.
fn check_no_empty_class(train_dir: &Path, wnids: &[String], train: &Header) -> Result<()> {
    match train.class_counts.iter().position(|&c| c == 0) {
        Some(c) => Err(PrepError::format(
            train_dir.join(&wnids[c]),
            "no usable training image in this class folder (all were skipped as unusable); replace them or remove the folder",
        )),
        None => Ok(()),
    }
}

/// Converts an ImageNet-layout folder into `out/train.aipk` and `out/val.aipk`. Both splits
/// are staged and replace the earlier ones together ([`commit_all`]), so a failure leaves
/// the earlier dataset as it was.
pub fn convert_imagenet(src: &Path, out: &Path, opts: &ImagenetOptions) -> Result<Vec<Header>> {
    check_options(src, opts)?;
    check_targets(&[split_path(out, "train"), split_path(out, "val")])?;
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
    let names = class_names(&wnids, opts)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| PrepError::format(src, format!("cannot start the decoding pool: {e}")))?;
    let mut inputs = vec![
        train_dir.display().to_string(),
        val_dir.display().to_string(),
    ];
    inputs.extend(opts.val_labels.iter().map(|p| p.display().to_string()));
    let splits = [("train", train_items), ("val", val_items)];
    let staged = pool.install(|| {
        let mut staged = Vec::new();
        for (split, items) in &splits {
            let pack = stage_split(
                &split_path(out, split),
                split,
                items,
                names.clone(),
                opts,
                inputs.clone(),
            )?;
            if *split == "train" {
                check_no_empty_class(&train_dir, &wnids, pack.header())?;
            }
            staged.push(pack);
        }
        Ok::<_, PrepError>(staged)
    })?;
    commit_all(staged)
}

/// Readable class names from `--synsets` where it has them, the wnids otherwise.
fn class_names(wnids: &[String], opts: &ImagenetOptions) -> Result<Vec<String>> {
    Ok(match &opts.synsets {
        Some(p) => {
            let map = labels::read_synsets(p)?;
            wnids
                .iter()
                .map(|w| map.get(w).cloned().unwrap_or_else(|| w.clone()))
                .collect()
        }
        None => wnids.to_vec(),
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
        let folders = class_folders(val_dir, None)?;
        if let Some(labels_path) = &opts.val_labels {
            let labels = read_val_labels(labels_path)?;
            labels::check_val_folders(labels_path, &labels, &folders)?;
        }
        let mut items = Vec::new();
        for (wnid, mut files) in folders {
            let Some(&label) = index.get(wnid.as_str()) else {
                return Err(PrepError::format(
                    val_dir.join(&wnid),
                    "validation class folder has no training counterpart in train/",
                ));
            };
            if let Some(l) = opts.limit_per_class {
                files.truncate(l);
            }
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
