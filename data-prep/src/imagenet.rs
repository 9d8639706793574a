//! ImageNet (ILSVRC-2012) folder layout: `train/<wnid>/*.JPEG` for training; validation
//! either as `val/<wnid>/*.JPEG` or as flat `val/*.JPEG` with a labels file. Every image is
//! decoded, resized so its shorter side is `size` and centre-cropped to `size`×`size`, on a
//! rayon pool, in chunks so memory stays bounded, with a progress bar.
//!
//! Memory per image is bounded too: the JPEG's dimensions are read from its header before
//! decoding and refused beyond [`MAX_SOURCE_PIXELS`] (a per-file error that `--skip-bad`
//! skips), and an image longer than [`MAX_ASPECT`]:1 is first centre-cropped to that ratio,
//! so that resizing its shorter side never makes an enormous long side.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use image::imageops::FilterType;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use crate::error::{PrepError, Result};
use crate::pack::{commit_all, split_path, Header, PackWriter, Source, StagedPack};

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

/// Largest output side (`--size`): 3×4096×4096 bytes (48 MiB) per image.
pub const MAX_SIZE: u32 = 4096;
/// Largest JPEG decoded, in pixels (64 Mi, e.g. 8192×8192: 192 MiB as RGB).
pub const MAX_SOURCE_PIXELS: u64 = 1 << 26;
/// Largest JPEG file read, in bytes.
pub const MAX_JPEG_FILE_BYTES: u64 = 256 << 20;
/// Longest aspect ratio resized as is; longer images are first centre-cropped to it.
pub const MAX_ASPECT: u32 = 4;

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
/// returns RGB in C×H×W order. An image longer than [`MAX_ASPECT`]:1 is first centre-cropped
/// to that ratio; one beyond [`MAX_SOURCE_PIXELS`] or [`MAX_JPEG_FILE_BYTES`] is refused with
/// [`PrepError::ImageTooLarge`] before it is decoded.
pub fn load_and_crop(path: &Path, size: u32) -> Result<Vec<u8>> {
    if size == 0 || size > MAX_SIZE {
        return Err(PrepError::format(
            path,
            format!("output size {size} is outside 1..={MAX_SIZE}"),
        ));
    }
    let img = limit_aspect(decode_bounded(path)?);
    Ok(resize_and_crop(&img, size))
}

/// Decodes a JPEG to RGB after checking its file size, that it is whole, and its header
/// dimensions.
fn decode_bounded(path: &Path) -> Result<image::RgbImage> {
    let file = File::open(path).map_err(|e| PrepError::io(path, e))?;
    let file_bytes = file.metadata().map_err(|e| PrepError::io(path, e))?.len();
    let too_large = |reason: String| PrepError::ImageTooLarge {
        path: path.into(),
        reason,
    };
    if file_bytes > MAX_JPEG_FILE_BYTES {
        return Err(too_large(format!(
            "file of {file_bytes} bytes, the limit is {MAX_JPEG_FILE_BYTES}"
        )));
    }
    let mut bytes = Vec::with_capacity(file_bytes as usize);
    BufReader::new(file)
        .read_to_end(&mut bytes)
        .map_err(|e| PrepError::io(path, e))?;
    // The decoder fills a cut file's missing rows with grey and says nothing: a JPEG must
    // end its scans with the end-of-image marker.
    if let Err(reason) = whole_jpeg(&bytes) {
        return Err(PrepError::BadJpeg {
            path: path.into(),
            reason,
        });
    }
    let bad = |e: image::ImageError| match e {
        image::ImageError::Limits(l) => too_large(l.to_string()),
        e => PrepError::BadJpeg {
            path: path.into(),
            reason: e.to_string(),
        },
    };
    let mut reader = ImageReader::with_format(std::io::Cursor::new(bytes), ImageFormat::Jpeg);
    let mut limits = Limits::default();
    // A second bound for the decoder; the pixel check below is the one that decides.
    limits.max_alloc = Some(MAX_SOURCE_PIXELS * 4);
    reader.limits(limits);
    let decoder = reader.into_decoder().map_err(bad)?;
    let (w, h) = decoder.dimensions();
    if w == 0 || h == 0 {
        return Err(PrepError::BadJpeg {
            path: path.into(),
            reason: format!("empty image ({w}x{h})"),
        });
    }
    let pixels = u64::from(w) * u64::from(h);
    if pixels > MAX_SOURCE_PIXELS {
        return Err(too_large(format!(
            "{w}x{h} = {pixels} pixels, the limit is {MAX_SOURCE_PIXELS}"
        )));
    }
    Ok(DynamicImage::from_decoder(decoder)
        .map_err(bad)?
        .into_rgb8())
}

/// Whether `b` is a whole JPEG: its marker segments up to the first scan (SOS) are complete
/// and an end-of-image marker (FF D9) follows the scan data. Entropy-coded data cannot hold
/// FF D9 (an FF there is followed by 00 or a restart marker), and a thumbnail's own EOI
/// sits in a segment before the first scan, so it does not count.
pub fn whole_jpeg(b: &[u8]) -> std::result::Result<(), String> {
    if !b.starts_with(&[0xFF, 0xD8]) {
        return Err("no start-of-image marker".into());
    }
    let mut i = 2;
    let sos = loop {
        while b.get(i) == Some(&0xFF) && b.get(i + 1) == Some(&0xFF) {
            i += 1; // fill bytes
        }
        match (b.get(i), b.get(i + 1)) {
            (Some(0xFF), Some(0xDA)) => break i,
            (Some(0xFF), Some(0xD0..=0xD7 | 0x01)) => i += 2,
            (Some(0xFF), Some(_)) => {
                let len = match (b.get(i + 2), b.get(i + 3)) {
                    (Some(&hi), Some(&lo)) => usize::from(u16::from_be_bytes([hi, lo])),
                    _ => {
                        return Err(format!(
                            "truncated: the file ends inside its header, at byte {}",
                            b.len()
                        ))
                    }
                };
                i += 2 + len;
            }
            (Some(&x), _) => {
                return Err(format!(
                    "corrupt header: byte {x:#04x} at {i} where a marker belongs"
                ))
            }
            (None, _) => {
                return Err(format!(
                    "truncated: the file ends inside its header, at byte {}",
                    b.len()
                ))
            }
        }
    };
    if b[sos..].windows(2).any(|w| w == [0xFF, 0xD9]) {
        Ok(())
    } else {
        Err(format!(
            "truncated: no end-of-image marker after the scan data ({} bytes; the file was cut short)",
            b.len()
        ))
    }
}

/// Centre-crops the long side of an image longer than [`MAX_ASPECT`]:1 to that ratio.
fn limit_aspect(img: image::RgbImage) -> image::RgbImage {
    let (w, h) = img.dimensions();
    let max_long = w.min(h).saturating_mul(MAX_ASPECT);
    if w.max(h) <= max_long {
        return img;
    }
    let (cw, ch) = (w.min(max_long), h.min(max_long));
    image::imageops::crop_imm(&img, (w - cw) / 2, (h - ch) / 2, cw, ch).to_image()
}

/// Resizes the shorter side to `size` (the other rounded, never below `size`, at most
/// [`MAX_ASPECT`]·`size` + 1 after [`limit_aspect`]) and centre-crops `size`×`size`, as C×H×W.
fn resize_and_crop(img: &image::RgbImage, size: u32) -> Vec<u8> {
    let (w, h) = img.dimensions();
    // The long side scaled like the short one, rounded, never below `size`.
    let scaled = |long: u32, short: u32| {
        let v = (u64::from(long) * u64::from(size) + u64::from(short) / 2) / u64::from(short);
        u32::try_from(v.max(size.into())).unwrap_or(u32::MAX)
    };
    let (nw, nh) = if w <= h {
        (size, scaled(h, w))
    } else {
        (scaled(w, h), size)
    };
    let resized;
    let img = if (nw, nh) == (w, h) {
        img
    } else {
        resized = image::imageops::resize(img, nw, nh, FilterType::Triangle);
        &resized
    };
    let (x0, y0) = ((nw - size) / 2, (nh - size) / 2);
    let s = size as usize;
    let mut chw = vec![0u8; 3 * s * s];
    for y in 0..s {
        for x in 0..s {
            let p = img.get_pixel(x0 + x as u32, y0 + y as u32).0;
            for c in 0..3 {
                chw[c * s * s + y * s + x] = p[c];
            }
        }
    }
    chw
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
/// are staged before either is renamed into place, so a failure leaves neither.
pub fn convert_imagenet(src: &Path, out: &Path, opts: &ImagenetOptions) -> Result<Vec<Header>> {
    check_options(src, opts)?;
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
            let map = read_synsets(p)?;
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
