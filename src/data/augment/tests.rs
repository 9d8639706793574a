//! Augmentation tests: each transform against its torchvision definition or a direct
//! formula, and the parsing of the command line's spellings.

use super::*;
use rand::SeedableRng;

const UNIT: fn(usize) -> Affine = |c| Affine {
    scale: vec![1.0; c],
    bias: vec![0.0; c],
};

fn ramp(c: usize, h: usize, w: usize) -> Vec<u8> {
    (0..c * h * w).map(|i| (i % 251) as u8).collect()
}

#[test]
fn augment_specs_parse_and_bad_ones_say_what_is_accepted() {
    assert_eq!("none".parse::<Augment>(), Ok(Augment::None));
    assert_eq!(
        "crop-flip:4".parse::<Augment>(),
        Ok(Augment::CropFlip { pad: 4 })
    );
    assert_eq!(
        "center-crop:224".parse::<Augment>(),
        Ok(Augment::CenterCrop { size: 224 })
    );
    assert_eq!(
        "random-resized-crop:64".parse::<Augment>(),
        Ok(Augment::random_resized_crop(64))
    );
    assert!("crop-flip:x"
        .parse::<Augment>()
        .unwrap_err()
        .contains("crop-flip:PAD"));
    assert!("blur"
        .parse::<Augment>()
        .unwrap_err()
        .contains("unknown augmentation"));
    for spec in [
        "none",
        "crop-flip:4",
        "center-crop:224",
        "random-resized-crop:64",
    ] {
        assert_eq!(spec.parse::<Augment>().unwrap().to_string(), spec);
    }
}

#[test]
fn none_is_plain_normalisation() {
    let shape = Shape { c: 2, h: 3, w: 4 };
    let src = ramp(2, 3, 4);
    let aff = Affine::from_mean_std(&[0.5, 0.25], &[0.5, 0.125]);
    let mut out = vec![0.0; 24];
    apply(
        &Augment::None,
        &src,
        shape,
        &aff,
        &mut ChaCha8Rng::seed_from_u64(0),
        &mut out,
    );
    for (i, (&o, &p)) in out.iter().zip(&src).enumerate() {
        let (m, s) = if i < 12 { (0.5, 0.5) } else { (0.25, 0.125) };
        assert!(
            (o - (f32::from(p) / 255.0 - m) / s).abs() < 1e-5,
            "element {i}"
        );
    }
}

/// Reference: explicit zero padding, crop, flip — the torchvision definition.
fn crop_flip_reference(
    src: &[u8],
    s: Shape,
    pad: usize,
    oy: usize,
    ox: usize,
    flip: bool,
) -> Vec<f32> {
    let (ph, pw) = (s.h + 2 * pad, s.w + 2 * pad);
    let mut out = vec![0.0; s.c * s.h * s.w];
    for c in 0..s.c {
        let mut padded = vec![0u8; ph * pw];
        for y in 0..s.h {
            for x in 0..s.w {
                padded[(y + pad) * pw + x + pad] = src[c * s.h * s.w + y * s.w + x];
            }
        }
        for y in 0..s.h {
            for x in 0..s.w {
                let cx = if flip { s.w - 1 - x } else { x };
                out[c * s.h * s.w + y * s.w + x] = f32::from(padded[(y + oy) * pw + cx + ox]);
            }
        }
    }
    out
}

#[test]
fn crop_flip_matches_pad_crop_flip_definition_for_every_offset() {
    let s = Shape { c: 3, h: 5, w: 7 };
    let src = ramp(3, 5, 7);
    let pad = 2;
    for oy in 0..=2 * pad {
        for ox in 0..=2 * pad {
            for flip in [false, true] {
                let mut out = vec![f32::NAN; 3 * 5 * 7];
                crop_flip(&src, s, &UNIT(3), (oy, ox), pad, flip, &mut out);
                assert_eq!(
                    out,
                    crop_flip_reference(&src, s, pad, oy, ox, flip),
                    "oy={oy} ox={ox} flip={flip}"
                );
            }
        }
    }
}

#[test]
fn center_crop_takes_the_middle() {
    let s = Shape { c: 1, h: 6, w: 6 };
    let src = ramp(1, 6, 6);
    let mut out = vec![0.0; 4];
    apply(
        &Augment::CenterCrop { size: 2 },
        &src,
        s,
        &UNIT(1),
        &mut ChaCha8Rng::seed_from_u64(0),
        &mut out,
    );
    assert_eq!(out, vec![14.0, 15.0, 20.0, 21.0]);
}

/// The direct formula: four source pixels per output pixel.
fn resize_reference(
    src: &[u8],
    s: Shape,
    (top, left, bh, bw): (usize, usize, usize, usize),
    size: usize,
    flip: bool,
) -> Vec<f32> {
    let rows = bilinear_axis(top, bh, size, s.h);
    let mut cols = bilinear_axis(left, bw, size, s.w);
    if flip {
        cols.reverse();
    }
    let mut out = Vec::new();
    for ch in 0..s.c {
        let plane = &src[ch * s.h * s.w..(ch + 1) * s.h * s.w];
        for &(y0, y1, wy) in &rows {
            for &(x0, x1, wx) in &cols {
                let p = |y: usize, x: usize| f32::from(plane[y * s.w + x]);
                let top = p(y0, x0) + (p(y0, x1) - p(y0, x0)) * wx;
                let bot = p(y1, x0) + (p(y1, x1) - p(y1, x0)) * wx;
                out.push(top + (bot - top) * wy);
            }
        }
    }
    out
}

#[test]
fn separable_resize_equals_the_direct_formula_bit_for_bit() {
    let s = Shape { c: 3, h: 37, w: 29 };
    let src: Vec<u8> = (0..3 * 37 * 29).map(|i| ((i * 7919) % 256) as u8).collect();
    // Down- and upscaling boxes, at the edges and inside, flipped or not.
    for (bx, size) in [
        ((0, 0, 37, 29), 16),
        ((5, 3, 9, 7), 24),
        ((30, 20, 7, 9), 5),
        ((0, 0, 37, 29), 64),
        ((2, 1, 1, 1), 3),
    ] {
        for flip in [false, true] {
            let mut out = vec![f32::NAN; 3 * size * size];
            resize_bilinear(&src, s, &UNIT(3), bx, size, flip, &mut out);
            assert_eq!(
                out,
                resize_reference(&src, s, bx, size, flip),
                "box {bx:?} size {size} flip {flip}"
            );
        }
    }
}

#[test]
fn bilinear_identity_size_reproduces_the_image() {
    let s = Shape { c: 2, h: 8, w: 8 };
    let src = ramp(2, 8, 8);
    let mut out = vec![0.0; 128];
    resize_bilinear(&src, s, &UNIT(2), (0, 0, 8, 8), 8, false, &mut out);
    let want: Vec<f32> = src.iter().map(|&p| f32::from(p)).collect();
    assert_eq!(out, want);
}

#[test]
fn bilinear_axis_uses_half_pixel_centres_and_clamps_at_the_edge() {
    // Downscale by two: output o samples source 2o + 0.5, halfway between 2o and 2o + 1.
    assert_eq!(bilinear_axis(0, 4, 2, 4), vec![(0, 1, 0.5), (2, 3, 0.5)]);
    // Upscale a 2-pixel box at offset 3 of a 5-pixel row: the last neighbour clamps.
    assert_eq!(
        bilinear_axis(3, 2, 4, 5),
        vec![(3, 4, 0.0), (3, 4, 0.25), (3, 4, 0.75), (4, 4, 0.25)]
    );
}

#[test]
fn resized_crop_box_stays_inside_and_respects_ranges() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for i in 0..2000 {
        let (h, w) = (17 + i % 50, 23 + (i * 7) % 60);
        let (t, l, bh, bw) = resized_crop_box(h, w, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut rng);
        assert!(
            bh >= 1 && bw >= 1 && t + bh <= h && l + bw <= w,
            "box {t},{l},{bh},{bw} in {h}x{w}"
        );
    }
    // An extreme image (aspect 10) falls back to the central crop clamped to ratio 4/3.
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (t, l, bh, bw) = resized_crop_box(10, 100, (0.99, 1.0), (0.75, 4.0 / 3.0), &mut rng);
    assert_eq!((t, bh, bw), (0, 10, 13));
    assert_eq!(l, (100 - 13) / 2);
}

#[test]
fn random_resized_crop_output_is_within_pixel_range() {
    let s = Shape { c: 3, h: 40, w: 30 };
    let src = ramp(3, 40, 30);
    let mut out = vec![f32::NAN; 3 * 16 * 16];
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..50 {
        apply(
            &Augment::random_resized_crop(16),
            &src,
            s,
            &UNIT(3),
            &mut rng,
            &mut out,
        );
        assert!(out.iter().all(|v| (0.0..=250.0).contains(v)));
    }
}
