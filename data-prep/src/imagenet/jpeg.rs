//! Decoding one ImageNet JPEG into a `size`×`size` RGB crop, with memory bounded per image
//! and damaged files refused by decoding them.
//!
//! Memory: the JPEG's dimensions are read from its header before decoding and refused beyond
//! [`MAX_SOURCE_PIXELS`] (a per-file error that `--skip-bad` skips), and an image longer than
//! [`MAX_ASPECT`]:1 is first centre-cropped to that ratio, so that resizing its shorter side
//! never makes an enormous long side.
//!
//! Damage: zune-jpeg, the decoder `image` uses, feeds zero bits once the scan data runs out
//! — at the end of the file or at an end-of-image marker — and fills the missing rows with
//! grey without an error, even in strict mode. So the scan data is decoded here with
//! the end-of-image marker (or the end of the file) moved behind `FILLER_BYTES` (64) bytes of
//! one-bits, which no Huffman table may use as a code: a decoder that needs data beyond the
//! file's own scan data reads them and fails, in strict mode, with an error; a complete file
//! never reads them (one-bits are also what a JPEG's last byte is padded with).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use image::imageops::FilterType;
use image::{DynamicImage, ImageBuffer};
use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::errors::DecodeErrors;
use zune_jpeg::JpegDecoder;

use crate::error::{PrepError, Result};

/// Largest output side (`--size`): 3×4096×4096 bytes (48 MiB) per image.
pub const MAX_SIZE: u32 = 4096;
/// Largest JPEG decoded, in pixels (64 Mi, e.g. 8192×8192: 192 MiB as RGB).
pub const MAX_SOURCE_PIXELS: u64 = 1 << 26;
/// Largest JPEG file read, in bytes.
pub const MAX_JPEG_FILE_BYTES: u64 = 256 << 20;
/// Longest aspect ratio resized as is; longer images are first centre-cropped to it.
pub const MAX_ASPECT: u32 = 4;
/// One-bit bytes (each `FF 00`, a stuffed `FF`) put where the scan data ends: 512 bits, far
/// more than the longest Huffman code (16 bits) plus its extra bits.
const FILLER_BYTES: usize = 64;

/// Decodes a JPEG, resizes its shorter side to `size` and centre-crops `size`×`size`;
/// returns RGB in C×H×W order. An image longer than [`MAX_ASPECT`]:1 is first centre-cropped
/// to that ratio; one beyond [`MAX_SOURCE_PIXELS`] or [`MAX_JPEG_FILE_BYTES`] is refused with
/// [`PrepError::ImageTooLarge`] before it is decoded; a damaged one (cut short, scan data
/// missing or corrupt) is refused with [`PrepError::BadJpeg`].
pub fn load_and_crop(path: &Path, size: u32) -> Result<Vec<u8>> {
    if size == 0 || size > MAX_SIZE {
        return Err(PrepError::format(
            path,
            format!("output size {size} is outside 1..={MAX_SIZE}"),
        ));
    }
    let bytes = read_bounded(path)?;
    let img = limit_aspect(decode_jpeg(path, &bytes)?);
    Ok(resize_and_crop(&img, size))
}

/// Reads a JPEG file after checking its size.
fn read_bounded(path: &Path) -> Result<Vec<u8>> {
    let file = File::open(path).map_err(|e| PrepError::io(path, e))?;
    let file_bytes = file.metadata().map_err(|e| PrepError::io(path, e))?.len();
    if file_bytes > MAX_JPEG_FILE_BYTES {
        return Err(PrepError::ImageTooLarge {
            path: path.into(),
            reason: format!("file of {file_bytes} bytes, the limit is {MAX_JPEG_FILE_BYTES}"),
        });
    }
    let mut bytes = Vec::with_capacity(file_bytes as usize);
    BufReader::new(file)
        .read_to_end(&mut bytes)
        .map_err(|e| PrepError::io(path, e))?;
    Ok(bytes)
}

/// Decodes the JPEG `bytes` (read from `path`, named in errors) to RGB, refusing it if it is
/// larger than [`MAX_SOURCE_PIXELS`] or damaged (see the module documentation).
pub fn decode_jpeg(path: &Path, bytes: &[u8]) -> Result<image::RgbImage> {
    let bad = |reason: String| PrepError::BadJpeg {
        path: path.into(),
        reason,
    };
    let input = with_filler(bytes).map_err(bad)?;
    let options = DecoderOptions::default()
        .set_strict_mode(false)
        .set_max_width(usize::MAX)
        .set_max_height(usize::MAX);
    // The headers, leniently (as `image` reads them): their dimensions bound the decoding.
    let mut probe = JpegDecoder::new_with_options(ZCursor::new(&input[..]), options);
    probe.decode_headers().map_err(|e| bad(e.to_string()))?;
    let info = probe.info().expect("headers decoded");
    let (w, h) = (u32::from(info.width), u32::from(info.height));
    if w == 0 || h == 0 {
        return Err(bad(format!("empty image ({w}x{h})")));
    }
    let pixels = u64::from(w) * u64::from(h);
    if pixels > MAX_SOURCE_PIXELS {
        return Err(PrepError::ImageTooLarge {
            path: path.into(),
            reason: format!("{w}x{h} = {pixels} pixels, the limit is {MAX_SOURCE_PIXELS}"),
        });
    }
    let colour = match probe.input_colorspace().expect("headers decoded") {
        c @ (ColorSpace::RGB | ColorSpace::RGBA | ColorSpace::Luma | ColorSpace::LumaA) => c,
        _ => ColorSpace::RGB,
    };
    let options = options.jpeg_set_out_colorspace(colour);
    let data = match decode_scans(&input, options, true) {
        // A file that only strict checks of its frame refuse decodes as other decoders do.
        Err(DecodeErrors::Format(m)) if m.contains("number of components") => {
            decode_scans(&input, options, false)
        }
        other => other,
    }
    .map_err(|e| {
        bad(format!(
            "truncated or corrupt scan data: decoding it fails with {}",
            e.to_string().trim()
        ))
    })?;
    to_rgb(w, h, colour, data).ok_or_else(|| bad("decoded data does not fit its size".into()))
}

/// Decodes the scan data of `input` in `colour`, the headers leniently and, when `strict`,
/// the scans strictly, so that reading the filler is an error.
fn decode_scans(
    input: &[u8],
    options: DecoderOptions,
    strict: bool,
) -> std::result::Result<Vec<u8>, DecodeErrors> {
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(input), options);
    decoder.decode_headers()?;
    decoder.set_options(options.set_strict_mode(strict));
    let mut out = vec![0u8; decoder.output_buffer_size().unwrap_or(0)];
    decoder.decode_into(&mut out)?;
    Ok(out)
}

/// The decoded pixels of a `w`×`h` image in `colour`, as RGB.
fn to_rgb(w: u32, h: u32, colour: ColorSpace, data: Vec<u8>) -> Option<image::RgbImage> {
    let img = match colour {
        ColorSpace::Luma => DynamicImage::ImageLuma8(ImageBuffer::from_raw(w, h, data)?),
        ColorSpace::LumaA => DynamicImage::ImageLumaA8(ImageBuffer::from_raw(w, h, data)?),
        ColorSpace::RGBA => DynamicImage::ImageRgba8(ImageBuffer::from_raw(w, h, data)?),
        _ => return ImageBuffer::from_raw(w, h, data),
    };
    Some(img.into_rgb8())
}

/// `b` with [`FILLER_BYTES`] one-bit bytes where its scan data ends: before the end-of-image
/// marker that follows the first scan, or at the end of the file if none does. An error
/// says how a file without any scan data ends, damage a decoder reports in less plain words.
fn with_filler(b: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let end = scan_data_end(b)?;
    let mut out = Vec::with_capacity(b.len() + 2 * FILLER_BYTES);
    out.extend_from_slice(&b[..end]);
    for _ in 0..FILLER_BYTES {
        out.extend_from_slice(&[0xFF, 0x00]);
    }
    out.extend_from_slice(&b[end..]);
    Ok(out)
}

/// Where the scan data ends: the offset of the end-of-image marker (FF D9) after the first
/// start-of-scan, or the file's length if there is none; an error if no scan starts.
/// Marker segments are skipped by their length, so an EOI inside a thumbnail does not count,
/// and entropy-coded data cannot hold FF D9 (an FF there is followed by 00 or a restart
/// marker). Stray bytes between segments are skipped, as decoders do.
fn scan_data_end(b: &[u8]) -> std::result::Result<usize, String> {
    if !b.starts_with(&[0xFF, 0xD8]) {
        return Err("no start-of-image marker: not a JPEG file".into());
    }
    let ends_in_header = || {
        format!(
            "truncated: the file ends inside its header, at byte {}",
            b.len()
        )
    };
    let (mut i, mut seen_scan) = (2, false);
    loop {
        // Stray bytes and fill bytes up to the marker's last FF.
        while i < b.len() && (b[i] != 0xFF || b.get(i + 1) == Some(&0xFF)) {
            i += 1;
        }
        let Some(&code) = b.get(i + 1) else {
            return if seen_scan {
                Ok(b.len())
            } else {
                Err(ends_in_header())
            };
        };
        match code {
            0xD9 if seen_scan => return Ok(i),
            0xD9 => {
                return Err(format!(
                    "truncated: headers but no scan data (the end-of-image marker at byte {i} comes before any start-of-scan)"
                ))
            }
            0xD0..=0xD8 | 0x01 | 0x00 => i += 2,
            _ => {
                let len = match (b.get(i + 2), b.get(i + 3)) {
                    (Some(&hi), Some(&lo)) => usize::from(u16::from_be_bytes([hi, lo])),
                    _ if seen_scan => return Ok(b.len()),
                    _ => return Err(ends_in_header()),
                };
                i += 2 + len;
                if i > b.len() && !seen_scan {
                    return Err(ends_in_header());
                }
                if code == 0xDA {
                    seen_scan = true;
                    i = skip_entropy_data(b, i);
                }
            }
        }
    }
}

/// The offset of the first marker other than a stuffed FF 00 or a restart marker at or after
/// `i`, in entropy-coded data (or the end of `b`).
fn skip_entropy_data(b: &[u8], mut i: usize) -> usize {
    while i + 1 < b.len() {
        if b[i] == 0xFF && !matches!(b[i + 1], 0x00 | 0xD0..=0xD7 | 0xFF) {
            return i;
        }
        i += 1;
    }
    b.len()
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
