//! A seeded corruption sweep over the records of a small run: truncations, bit flips and
//! runs of 0xFF bytes (which turn sizes and addresses into huge numbers) over `primary.h5`
//! and `group-<g>.h5`. Every outcome must be a run that scores or a clean error naming the
//! damaged file: no panic, no abort, no hang.
//!
//! HDF5 1.10 itself crashes on some damage (it trusts lengths and counts in its metadata);
//! `src/h5guard.rs` refuses those before HDF5 sees them. Hunts of 10,000 cases per file over
//! many seeds found the crashes pinned one by one in
//! `each_damage_that_crashed_hdf5_is_refused_before_hdf5_sees_it`.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aiperf_records::{read_architectures, read_config, read_run, read_tpe, report, score};
use common::{serial, write_run};

/// Seeded cases per file. For longer hunts: `AIPERF_SWEEP_CASES` overrides it,
/// `AIPERF_SWEEP_SEED` shifts the seeds, `AIPERF_SWEEP_TRACE=1` prints each case before it
/// runs (the last line names the one that crashed), `AIPERF_SWEEP_SAVE=DIR` copies the
/// undamaged files there (to replay a case outside the test).
const CASES: usize = 1000;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// SplitMix64: a tiny seeded generator, enough to spread mutations over a file.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What case `i` does to `good`; the description says how to replay it.
fn mutate(good: &[u8], i: usize, rng: &mut Mix) -> (Vec<u8>, String) {
    let mut bytes = good.to_vec();
    let what = match i % 4 {
        0 => {
            let at = rng.below(good.len());
            bytes.truncate(at);
            format!("truncated to {at} bytes")
        }
        1 | 2 => {
            let flips: Vec<(usize, u8)> = (0..1 + rng.below(8))
                .map(|_| (rng.below(bytes.len()), 1u8 << rng.below(8)))
                .collect();
            for &(at, bit) in &flips {
                bytes[at] ^= bit;
            }
            format!("bits flipped (offset, mask): {flips:?}")
        }
        _ => {
            let at = rng.below(bytes.len());
            let len = (1 + rng.below(16)).min(bytes.len() - at);
            bytes[at..at + len].fill(0xFF);
            format!("{len} bytes of 0xFF at {at}")
        }
    };
    (bytes, what)
}

fn cases() -> usize {
    env_or("AIPERF_SWEEP_CASES", CASES as u64) as usize
}

/// Fails the test (and ends the process, which a hang inside HDF5 would otherwise block)
/// when a case takes longer than `limit`.
fn watchdog(progress: Arc<AtomicUsize>, limit: Duration) {
    std::thread::spawn(move || {
        let (mut seen, mut since) = (progress.load(Ordering::SeqCst), Instant::now());
        loop {
            std::thread::sleep(Duration::from_millis(200));
            let now = progress.load(Ordering::SeqCst);
            if now == usize::MAX {
                return;
            }
            if now != seen {
                (seen, since) = (now, Instant::now());
            } else if since.elapsed() > limit {
                eprintln!("corruption sweep: case {now} hangs (over {limit:?})");
                std::process::exit(101);
            }
        }
    });
}

/// Runs `CASES` mutations of `dir/name` (restored afterwards); returns (scored, refused).
fn sweep(dir: &Path, name: &str, seed: u64, progress: &AtomicUsize) -> (usize, usize) {
    let path = dir.join(name);
    let good = std::fs::read(&path).unwrap();
    let mut rng = Mix(seed);
    let (mut scored, mut refused) = (0, 0);
    for i in 0..cases() {
        progress.fetch_add(1, Ordering::SeqCst);
        let (bytes, what) = mutate(&good, i, &mut rng);
        std::fs::write(&path, &bytes).unwrap();
        let case = format!("{name} case {i} (seed {seed:#x}): {what}");
        if std::env::var_os("AIPERF_SWEEP_TRACE").is_some() {
            eprintln!("{case}");
        }
        match read_run(dir) {
            Ok(run) => match score(&run, 360.0) {
                Ok(s) => {
                    assert!(!report::text(&s).is_empty(), "{case}");
                    serde_json::to_string(&s).unwrap_or_else(|e| panic!("{case}: {e}"));
                    scored += 1;
                }
                Err(e) => {
                    assert!(!e.to_string().is_empty(), "{case}");
                    refused += 1;
                }
            },
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(name),
                    "{case}: the error does not name it: {msg}"
                );
                refused += 1;
            }
        }
        // The rest of what the crate reads from primary.h5 (`aiperf run --resume` does).
        if name == "primary.h5" {
            let errors = [
                read_architectures(dir).err(),
                read_tpe(dir).err(),
                read_config(dir).err(),
            ];
            for e in errors.into_iter().flatten() {
                let msg = e.to_string();
                assert!(msg.contains(name), "{case}: {msg}");
            }
        }
    }
    std::fs::write(&path, &good).unwrap();
    (scored, refused)
}

#[test]
fn corrupted_bytes_never_panic_abort_or_hang_the_reader() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    if let Some(save) = std::env::var_os("AIPERF_SWEEP_SAVE") {
        for f in ["primary.h5", "group-0.h5", "group-1.h5"] {
            std::fs::copy(tmp.path().join(f), Path::new(&save).join(f)).unwrap();
        }
    }
    let progress = Arc::new(AtomicUsize::new(0));
    watchdog(progress.clone(), Duration::from_secs(20));
    let started = Instant::now();
    let shift = env_or("AIPERF_SWEEP_SEED", 0);
    for (name, seed) in [
        ("primary.h5", 0x5eed_0001),
        ("group-0.h5", 0x5eed_0002),
        ("group-1.h5", 0x5eed_0003),
    ] {
        let (scored, refused) = sweep(tmp.path(), name, seed + (shift << 16), &progress);
        eprintln!("{name}: {scored} scored, {refused} refused cleanly");
        assert_eq!(scored + refused, cases());
        // Damage is seen: a good share of the cases are refused.
        assert!(refused > cases() / 10, "{name}: only {refused} refused");
    }
    progress.store(usize::MAX, Ordering::SeqCst);
    eprintln!("sweep: {:?}", started.elapsed());
}

/// Where `pattern` first occurs in `bytes`.
fn find(bytes: &[u8], pattern: &[u8]) -> usize {
    bytes
        .windows(pattern.len())
        .position(|w| w == pattern)
        .unwrap_or_else(|| panic!("{pattern:?} not in the file"))
}

/// The damage that crashed HDF5 1.10.8 in the sweep (a segmentation fault, a floating-point
/// exception or a hang), one case each: now refused before HDF5 decodes it.
#[test]
fn each_damage_that_crashed_hdf5_is_refused_before_hdf5_sees_it() {
    let _serial = serial();
    type Damage = fn(&mut Vec<u8>);
    let cases: [(&str, &str, Damage); 7] = [
        (
            "an enum whose base type has 2^32 - 1 bytes (values copied past it)",
            "primary.h5",
            |b| {
                // The trial status: the enum's header (8), its u8 base (8 + 4), the names.
                let names = find(b, b"Finished\0");
                b[names - 8..names - 4].fill(0xFF);
            },
        ),
        (
            "a compound member offset past its row (converted out of bounds)",
            "primary.h5",
            |b| {
                let name = find(b, b"kernel_size\0"); // padded to 16, then the offset
                b[name + 19] |= 0x10;
            },
        ),
        (
            "a global heap object larger than its collection (copied past it)",
            "primary.h5",
            |b| {
                let heap = find(b, b"GCOL\x01\0\0\0");
                b[heap + 16 + 8 + 5] = 0x40; // object 1's size, high bytes
            },
        ),
        (
            "a global heap free space that steps out of its collection",
            "primary.h5",
            |b| {
                let heap = find(b, b"GCOL\x01\0\0\0");
                let size = u64::from_le_bytes(b[heap + 8..heap + 16].try_into().unwrap()) as usize;
                // The last object before the end is the free space (index 0): its size, high bytes.
                let mut p = heap + 16;
                loop {
                    let len = u64::from_le_bytes(b[p + 8..p + 16].try_into().unwrap()) as usize;
                    if b[p..p + 2] == [0, 0] {
                        b[p + 12..p + 16].fill(0xFF);
                        break;
                    }
                    p += 16 + len.div_ceil(8) * 8;
                    assert!(p < heap + size);
                }
            },
        ),
        (
            "a root group continuation at an address past the file",
            "group-0.h5",
            |b| {
                // Superblock 0: the root's object header address at byte 64; its first message
                // (a continuation) starts 16 bytes in, its address 8 further.
                let root = u64::from_le_bytes(b[64..72].try_into().unwrap()) as usize;
                b[root + 24..root + 32].fill(0xFF);
            },
        ),
        (
            "a local heap of 2^64 bytes (the group's member names)",
            "group-0.h5",
            |b| {
                let heap = find(b, b"HEAP\0");
                b[heap + 8..heap + 16].fill(0xFF);
            },
        ),
        (
            "a chunked layout read as version 2 (a chunk dimension of 0)",
            "group-0.h5",
            |b| {
                // Version 3, chunked, 2 dimensions, the B-tree address, 256 rows per chunk.
                let at = (0..b.len() - 15)
                    .find(|&i| b[i..i + 3] == [3, 2, 2] && b[i + 11..i + 15] == [0, 1, 0, 0])
                    .unwrap();
                b[at] = 2;
            },
        ),
    ];
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    for (what, name, damage) in cases {
        let path = tmp.path().join(name);
        let good = std::fs::read(&path).unwrap();
        let mut bytes = good.clone();
        damage(&mut bytes);
        std::fs::write(&path, &bytes).unwrap();
        let e = read_run(tmp.path()).unwrap_err().to_string();
        assert!(e.contains(name) && e.contains("damaged"), "{what}: {e}");
        std::fs::write(&path, &good).unwrap();
    }
    assert!(read_run(tmp.path()).is_ok());
}
