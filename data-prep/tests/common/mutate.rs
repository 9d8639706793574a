//! Seeded corruption of input files: a small xorshift generator (no RNG crate needed) and
//! mutations that truncate, flip bits, zero or fill ranges, append garbage, and write
//! extreme values into an input's size fields.

/// xorshift64*: a tiny, seeded, reproducible generator.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value; 0 is remapped).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// A size field of an input format: where it is, how wide, which byte order.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    /// Byte offset in the file.
    pub offset: usize,
    /// Width in bytes (1, 2, 4 or 8).
    pub width: usize,
    /// Big-endian (IDX) rather than little-endian (packs).
    pub big_endian: bool,
}

/// Extreme values to write into a size field: zeros, ones, the largest values of u32 and
/// u64, powers of two just past common limits, and a random one.
pub fn extreme_value(rng: &mut Rng) -> u64 {
    let values = [
        0,
        1,
        2,
        255,
        65_535,
        65_536,
        1 << 31,
        u64::from(u32::MAX),
        1 << 32,
        1 << 63,
        u64::MAX,
        u64::MAX - 1,
    ];
    if rng.below(4) == 0 {
        rng.next_u64()
    } else {
        rng.pick(&values)
    }
}

/// Writes `value` (truncated to the field's width) into `field` of `bytes`, if it fits.
pub fn write_field(bytes: &mut [u8], field: Field, value: u64) {
    let Some(dst) = bytes.get_mut(field.offset..field.offset + field.width) else {
        return;
    };
    let le = value.to_le_bytes();
    for (i, b) in dst.iter_mut().enumerate() {
        let k = if field.big_endian {
            field.width - 1 - i
        } else {
            i
        };
        *b = le[k];
    }
}

/// One seeded mutation of `good`: a truncation, bit flips, an extreme value in one of
/// `fields`, a zeroed or 0xff-filled range, appended garbage, or a field and a truncation.
pub fn mutate(rng: &mut Rng, good: &[u8], fields: &[Field]) -> Vec<u8> {
    let mut bad = good.to_vec();
    let kinds = if fields.is_empty() { 5 } else { 7 };
    match rng.below(kinds) {
        0 => bad.truncate(rng.below(good.len() + 1)),
        1 => {
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(bad.len().max(1));
                if let Some(b) = bad.get_mut(i) {
                    *b ^= 1 << rng.below(8);
                }
            }
        }
        2 => {
            let (start, len) = range(rng, bad.len());
            bad[start..start + len].fill(0);
        }
        3 => {
            let (start, len) = range(rng, bad.len());
            bad[start..start + len].fill(0xff);
        }
        4 => {
            let extra = 1 + rng.below(64);
            bad.extend((0..extra).map(|_| rng.next_u64() as u8));
        }
        5 => write_field(&mut bad, rng.pick(fields), extreme_value(rng)),
        _ => {
            write_field(&mut bad, rng.pick(fields), extreme_value(rng));
            bad.truncate(rng.below(good.len() + 1));
        }
    }
    bad
}

/// A random range within `len` bytes, at most 64 long.
fn range(rng: &mut Rng, len: usize) -> (usize, usize) {
    if len == 0 {
        return (0, 0);
    }
    let start = rng.below(len);
    (start, (1 + rng.below(64)).min(len - start))
}

/// Rewrites a pack's JSON header through `edit`, keeping the preamble's length field in step.
pub fn rewrite_pack_header(pack: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let word = |at: usize| u64::from_le_bytes(pack[at..at + 8].try_into().unwrap()) as usize;
    let (h_off, h_len) = (word(16), word(24));
    let mut header: serde_json::Value =
        serde_json::from_slice(&pack[h_off..h_off + h_len]).unwrap();
    edit(&mut header);
    let json = serde_json::to_vec(&header).unwrap();
    let mut out = pack[..h_off].to_vec();
    out[24..32].copy_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out
}
