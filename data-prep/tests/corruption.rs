//! Corruption sweeps: for each input format (`.aipk`, IDX raw and gzipped, CIFAR-10 binary),
//! thousands of seeded mutations of a valid file — truncations, bit flips, zeroed or filled
//! ranges, appended garbage, extreme values in the size fields, and for the header formats
//! every combination of extreme values in their size fields — fed to the library's
//! readers. Every outcome must be `Ok` or an error that names the file: a panic fails the
//! test (no `catch_unwind`), and the binary runs under [`AllocGuard`], so no mutation may
//! make the readers allocate more than [`common::alloc_guard::HUGE_BYTES`] at once.

mod common;

use std::fs;
use std::path::Path;
use std::time::Instant;

use aiperf_data_prep::cifar::{batch_records, convert_cifar10, parse_cifar_names, CIFAR_RECORD};
use aiperf_data_prep::idx::{convert_idx_dir, decode_idx, IdxDataset, IdxSplit};
use aiperf_data_prep::{split_path, Header, Pack, PackWriter, PrepError, Source};
use common::alloc_guard::{assert_no_huge_allocation, AllocGuard};
use common::mutate::{extreme_value, mutate, rewrite_pack_header, Field, Rng};
use common::{bytes, gz, idx_bytes, write_cifar, write_idx};

#[global_allocator]
static GUARD: AllocGuard = AllocGuard;

/// Mutations per format.
const CASES: usize = 1500;
/// Every this many cases also runs the whole converter on files (which syncs its output).
const END_TO_END_EVERY: usize = 25;

/// Counts outcomes and checks that each error names the file it is about.
#[derive(Default)]
struct Outcomes {
    ok: usize,
    err: usize,
}

impl Outcomes {
    fn record<T>(&mut self, case: usize, result: Result<T, PrepError>, names: &[&str]) {
        match result {
            Ok(_) => self.ok += 1,
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    names.iter().any(|n| msg.contains(n)),
                    "case {case}: the error does not name the file ({names:?}): {msg}"
                );
                self.err += 1;
            }
        }
    }

    fn finish(&self, format: &str, start: Instant) {
        eprintln!(
            "{format}: {} mutations, {} read fine, {} refused, in {:.2} s",
            self.ok + self.err,
            self.ok,
            self.err,
            start.elapsed().as_secs_f64()
        );
        assert!(self.err > 0, "{format}: no mutation was refused");
        assert_no_huge_allocation(format);
    }
}

fn source() -> Source {
    Source {
        kind: "test".into(),
        dataset: "test".into(),
        inputs: vec![],
        processing: String::new(),
        subset: Some(false),
    }
}

/// Opens a pack and touches everything a loader would read.
fn read_pack(path: &Path) -> Result<u64, PrepError> {
    let pack = Pack::open(path)?;
    let mut sum = 0u64;
    for i in 0..pack.len() {
        sum += pack.image(i).iter().map(|&p| u64::from(p)).sum::<u64>();
        sum += u64::from(pack.label(i));
    }
    pack.verify()?;
    Ok(sum)
}

/// A mutation of a pack's JSON header: one size field set to an extreme value.
fn mutate_pack_json(rng: &mut Rng, good: &[u8]) -> Vec<u8> {
    let fields = [
        "num_samples",
        "channels",
        "height",
        "width",
        "num_classes",
        "images_offset",
        "labels_offset",
        "class_counts",
        "class_names",
        "crc32",
    ];
    let field = rng.pick(&fields);
    let value = extreme_value(rng);
    rewrite_pack_header(good, |h| {
        h[field] = match field {
            "class_counts" => vec![value; rng.below(5)].into(),
            "class_names" => vec!["x"; rng.below(5)].into(),
            _ => value.into(),
        }
    })
}

/// Every pair of the JSON header's size fields set to every pair of extreme values.
fn pack_header_extremes(path: &Path, good: &[u8], outcomes: &mut Outcomes) {
    let fields = [
        "num_samples",
        "channels",
        "height",
        "width",
        "labels_offset",
    ];
    for (i, a) in fields.iter().enumerate() {
        for b in &fields[i + 1..] {
            for va in EXTREME_U32 {
                for vb in EXTREME_U32 {
                    let bad = rewrite_pack_header(good, |h| {
                        h[*a] = va.into();
                        h[*b] = vb.into();
                    });
                    fs::write(path, &bad).unwrap();
                    outcomes.record(0, read_pack(path), &["sweep.aipk"]);
                }
            }
        }
    }
}

#[test]
fn pack_corruption_sweep() {
    let start = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("sweep.aipk");
    let mut w = PackWriter::create(&path, "train", [2, 3, 4], 3).unwrap();
    for i in 0..7u32 {
        w.push(&bytes(24, i), i % 3, Path::new("src")).unwrap();
    }
    let names = vec!["a".into(), "b".into(), "c".into()];
    let h = w.finish(names, source(), 0).unwrap();
    let good = fs::read(&path).unwrap();
    // Preamble fields (version, header offset, header length), then the data and JSON.
    let le = |offset, width| Field {
        offset,
        width,
        big_endian: false,
    };
    let fields = [le(8, 4), le(16, 8), le(24, 8), le(12, 4)];
    let data_start = h.images_offset as usize;
    let mut rng = Rng::new(0xa1_9e4f);
    let mut outcomes = Outcomes::default();
    pack_header_extremes(&path, &good, &mut outcomes);
    for case in 0..CASES {
        let bad = match rng.below(4) {
            0 => mutate_pack_json(&mut rng, &good),
            // Mutations of the data, labels and JSON rather than the zero padding.
            1 => {
                let mut bad = good[..data_start].to_vec();
                bad.extend(mutate(&mut rng, &good[data_start..], &[]));
                bad
            }
            _ => mutate(&mut rng, &good, &fields),
        };
        fs::write(&path, &bad).unwrap();
        outcomes.record(case, read_pack(&path), &["sweep.aipk"]);
    }
    outcomes.finish("aipk", start);
}

/// Decodes an image and a label file and pushes every sample into a pack, as the converter
/// does (without syncing a finished file).
fn idx_pipeline(images: &[u8], labels: &[u8], out: &Path) -> Result<usize, PrepError> {
    let (ip, lp) = (Path::new("images-idx3"), Path::new("labels-idx1"));
    let split = IdxSplit::new(
        ip,
        decode_idx(ip, images, 3)?,
        lp,
        decode_idx(lp, labels, 1)?,
        10,
    )?;
    let mut writer = PackWriter::create(out, "train", split.shape(), 10)?;
    for (image, label) in split.samples() {
        writer.push(image, label.into(), ip)?;
    }
    Ok(writer.len())
}

/// Extreme values for a u32 size field.
const EXTREME_U32: [u32; 8] = [0, 1, 2, 255, 65_535, 65_536, 1 << 31, u32::MAX];

/// Every combination of extreme values in an image file's three dimensions (n, rows,
/// columns), with the data and with none, beside a label file of n labels (at most 9
/// present) — such as no images of 65536×65536, whose size once overflowed to 0.
fn idx_header_extremes(gzip: bool, outcomes: &mut Outcomes, out: &Path) {
    let (data, label_data) = (bytes(180, 3), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    for (n, h, w, with_data) in EXTREME_U32.iter().flat_map(|&n| {
        EXTREME_U32.iter().flat_map(move |&h| {
            EXTREME_U32
                .iter()
                .flat_map(move |&w| [(n, h, w, true), (n, h, w, false)])
        })
    }) {
        let mut images = idx_bytes(&[n, h, w], if with_data { &data } else { &[] });
        let present = label_data.len().min(n as usize);
        let mut labels = idx_bytes(&[n], &label_data[..present]);
        if gzip {
            (images, labels) = (gz(&images), gz(&labels));
        }
        let result = idx_pipeline(&images, &labels, out);
        outcomes.record(0, result, &["images-idx3", "labels-idx1"]);
    }
}

/// The IDX sweep; `gzip` compresses the (possibly mutated) files, and then also mutates the
/// compressed stream itself in some cases.
fn idx_sweep(gzip: bool, seed: u64) {
    let start = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let images = idx_bytes(&[9, 5, 4], &bytes(180, 1));
    let labels = idx_bytes(
        &[9],
        &bytes(9, 2).iter().map(|b| b % 10).collect::<Vec<_>>(),
    );
    let be = |offset| Field {
        offset,
        width: 4,
        big_endian: true,
    };
    let (image_fields, label_fields) = ([be(4), be(8), be(12), be(0)], [be(4), be(0)]);
    let mut rng = Rng::new(seed);
    let mut outcomes = Outcomes::default();
    idx_header_extremes(gzip, &mut outcomes, &tmp.path().join("out.aipk"));
    for case in 0..CASES {
        let (mut img, mut lbl) = (images.clone(), labels.clone());
        if rng.below(4) == 0 {
            lbl = mutate(&mut rng, &labels, &label_fields);
        } else {
            img = mutate(&mut rng, &images, &image_fields);
        }
        if gzip {
            let (gi, gl) = (gz(&img), gz(&lbl));
            // Also corrupt the compressed stream itself (its CRC catches most flips).
            (img, lbl) = match rng.below(3) {
                0 => (mutate(&mut rng, &gi, &[]), gl),
                _ => (gi, gl),
            };
        }
        let out = tmp.path().join("out.aipk");
        let result = idx_pipeline(&img, &lbl, &out);
        outcomes.record(case, result, &["images-idx3", "labels-idx1"]);
        if case % END_TO_END_EVERY == 0 {
            let result = idx_end_to_end(tmp.path(), case, &img, &lbl, gzip);
            outcomes.record(case, result, &["train-images", "train-labels"]);
        }
    }
    outcomes.finish(if gzip { "idx.gz" } else { "idx" }, start);
}

/// Runs the IDX converter on a folder whose training files are `images` and `labels`; a
/// failure must leave no pack behind.
fn idx_end_to_end(
    dir: &Path,
    case: usize,
    images: &[u8],
    labels: &[u8],
    gzip: bool,
) -> Result<Vec<Header>, PrepError> {
    let src = dir.join(format!("src{case}"));
    write_idx(&src, 3, 2, gzip);
    let ext = if gzip { ".gz" } else { "" };
    fs::write(src.join(format!("train-images-idx3-ubyte{ext}")), images).unwrap();
    fs::write(src.join(format!("train-labels-idx1-ubyte{ext}")), labels).unwrap();
    let out = dir.join(format!("out{case}"));
    let result = convert_idx_dir(&src, &out, IdxDataset::FashionMnist);
    if result.is_err() {
        assert!(!split_path(&out, "train").exists(), "case {case}");
    }
    fs::remove_dir_all(&src).unwrap();
    let _ = fs::remove_dir_all(&out);
    result
}

#[test]
fn idx_raw_corruption_sweep() {
    idx_sweep(false, 0x1d_0001);
}

#[test]
fn idx_gzip_corruption_sweep() {
    idx_sweep(true, 0x1d_0002);
}

/// Parses a class-name file and a batch and pushes the records into a pack.
fn cifar_pipeline(meta: &[u8], batch: &[u8], out: &Path) -> Result<usize, PrepError> {
    let names = parse_cifar_names(Path::new("batches.meta.txt"), meta)?;
    let num_classes = u32::try_from(names.len()).unwrap_or(u32::MAX);
    let path = Path::new("data_batch_1.bin");
    let records = batch_records(path, batch, num_classes)?;
    let mut writer = PackWriter::create(out, "train", [3, 32, 32], num_classes)?;
    for (image, label) in records {
        writer.push(image, label, path)?;
    }
    Ok(writer.len())
}

#[test]
fn cifar_corruption_sweep() {
    let start = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let good = write_cifar(&tmp.path().join("good"), 4);
    let meta = fs::read(tmp.path().join("good/batches.meta.txt")).unwrap();
    // The label bytes that open each record.
    let labels: Vec<Field> = (0..4)
        .map(|r| Field {
            offset: r * CIFAR_RECORD,
            width: 1,
            big_endian: false,
        })
        .collect();
    let mut rng = Rng::new(0xc1_fa10);
    let mut outcomes = Outcomes::default();
    for case in 0..CASES {
        let (mut m, mut batch) = (meta.clone(), good[0].clone());
        if rng.below(5) == 0 {
            m = mutate(&mut rng, &meta, &[]);
        } else {
            batch = mutate(&mut rng, &good[0], &labels);
        }
        let out = tmp.path().join("out.aipk");
        let result = cifar_pipeline(&m, &batch, &out);
        outcomes.record(case, result, &["batches.meta.txt", "data_batch_1.bin"]);
        if case % END_TO_END_EVERY == 0 {
            let src = tmp.path().join(format!("src{case}"));
            write_cifar(&src, 2);
            fs::write(src.join("batches.meta.txt"), &m).unwrap();
            fs::write(src.join("test_batch.bin"), &batch).unwrap();
            let out = tmp.path().join(format!("out{case}"));
            let result = convert_cifar10(&src, &out);
            if result.is_err() {
                assert!(!split_path(&out, "train").exists(), "case {case}");
            }
            outcomes.record(case, result, &["batches.meta.txt", "_batch"]);
        }
    }
    outcomes.finish("cifar10", start);
}
