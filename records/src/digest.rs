//! Tamper evidence (docs/design.md §6, schema 3): every dataset of every record file is a chain
//! of SHA-256 digests (each of the previous digest and the row's bytes); epoch, trial and
//! TPE rows also carry their running digest in their `digest` field, so the first altered
//! row is named. At a clean stop `primary.h5` records the end of every chain
//! (`primary_digests`, `group_digests`) and a run digest over **every attribute of
//! [`crate::schema::PRIMARY_ATTRS`]** — the schema's own table, so an attribute added there
//! is sealed without a change here — including those chain ends. Rank 0 prints it in its
//! closing log line; a reviewer checks it with `aiperf score --digest HEX`.
//!
//! Byte encoding (documented in `results/README.md`): a row is the little-endian bytes of
//! its compound members in member order, without its `digest` member; an architecture row
//! is its model id (u64) then its JSON text as a u64 length and UTF-8 bytes; the run
//! digest's attributes are each name (u64 length, bytes), a tag (0 absent, 1 u32, 2 u64,
//! 3 f64 bits, 4 text) and the value (text: u64 length, bytes).

use hdf5::types::TypeDescriptor;
use hdf5::H5Type;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::schema::{AttrValue, EpochRow, StepRow, TpeRow, TrialRow};

/// A SHA-256 digest.
pub type Digest = [u8; 32];

/// The start of the chain of `dataset` in the file named `file` (its "previous digest"
/// before the first row): SHA-256 of `aiperf-chain-3`, NUL, the file name, NUL, the dataset.
pub fn chain_seed(file: &str, dataset: &str) -> Digest {
    let mut h = Sha256::new();
    h.update(b"aiperf-chain-3\0");
    h.update(file.as_bytes());
    h.update(b"\0");
    h.update(dataset.as_bytes());
    h.finalize().into()
}

/// Appends the little-endian bytes of one fixed-size member of type `ty` at `ptr`.
///
/// # Safety
/// `ptr` must point at `ty.size()` initialised bytes.
unsafe fn put_member(h: &mut Sha256, ty: &TypeDescriptor, ptr: *const u8) {
    match ty {
        TypeDescriptor::FixedArray(elem, n) => {
            for i in 0..*n {
                put_member(h, elem, ptr.add(i * elem.size()));
            }
        }
        TypeDescriptor::Integer(_)
        | TypeDescriptor::Unsigned(_)
        | TypeDescriptor::Float(_)
        | TypeDescriptor::Boolean
        | TypeDescriptor::Enum(_) => {
            let mut bytes = std::slice::from_raw_parts(ptr, ty.size()).to_vec();
            if cfg!(target_endian = "big") {
                bytes.reverse();
            }
            h.update(&bytes);
        }
        other => panic!("record rows hold fixed-size numbers only, not {other}"),
    }
}

/// Appends the encoding of `row` (every compound member but `digest`, in member order).
fn put_row<T: H5Type>(h: &mut Sha256, row: &T) {
    let base = (row as *const T).cast::<u8>();
    match T::type_descriptor() {
        TypeDescriptor::Compound(c) => {
            let mut fields = c.fields.clone();
            fields.sort_by_key(|f| f.offset);
            for f in fields.iter().filter(|f| f.name != "digest") {
                // SAFETY: the derived descriptor's offsets and sizes are the struct's own
                // members, which are initialised (padding between them is never read).
                unsafe { put_member(h, &f.ty, base.add(f.offset)) }
            }
        }
        // SAFETY: a scalar row is all its bytes.
        ty => unsafe { put_member(h, &ty, base) },
    }
}

/// The digest of `row` after `prev`: SHA-256 of `prev` and the row's encoding.
pub fn row_digest<T: H5Type>(prev: &Digest, row: &T) -> Digest {
    let mut h = Sha256::new();
    h.update(prev);
    put_row(&mut h, row);
    h.finalize().into()
}

/// The digest of architecture row (`model_id`, `json`) after `prev`.
pub fn architecture_digest(prev: &Digest, model_id: u64, json: &str) -> Digest {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(model_id.to_le_bytes());
    h.update((json.len() as u64).to_le_bytes());
    h.update(json.as_bytes());
    h.finalize().into()
}

/// Rows that carry their running digest in a `digest` member.
pub trait Carried: H5Type + Copy {
    /// The stored digest.
    fn digest(&self) -> Digest;
    /// Stores `d`.
    fn set_digest(&mut self, d: Digest);
}

macro_rules! carried {
    ($($t:ty),*) => {$(
        impl Carried for $t {
            fn digest(&self) -> Digest {
                self.digest
            }
            fn set_digest(&mut self, d: Digest) {
                self.digest = d;
            }
        }
    )*};
}
carried!(EpochRow, StepRow, TrialRow, TpeRow);

/// Fills in the digests of `rows`, which follow a chain whose last digest is `prev`;
/// returns the new last digest.
pub fn seal<T: Carried>(prev: Digest, rows: &mut [T]) -> Digest {
    rows.iter_mut().fold(prev, |prev, r| {
        let d = row_digest(&prev, r);
        r.set_digest(d);
        d
    })
}

/// The first row (from 0) whose carried digest does not follow from its contents and the
/// rows before it, starting from `seed`; `None` when every row follows.
pub fn first_broken<T: Carried>(seed: Digest, rows: &[T]) -> Option<usize> {
    let mut prev = seed;
    for (i, r) in rows.iter().enumerate() {
        if row_digest(&prev, r) != r.digest() {
            return Some(i);
        }
        prev = r.digest();
    }
    None
}

/// The last digest of a chain of rows that carry their digests, as stored (`seed` for no
/// rows): where an appending writer goes on.
pub fn last_carried<T: Carried>(seed: Digest, rows: &[T]) -> Digest {
    rows.last().map_or(seed, Carried::digest)
}

/// The last digest of a chain of `rows` (of any row type) from `seed` (`seed` itself for
/// no rows).
pub fn chain<T: H5Type>(seed: Digest, rows: &[T]) -> Digest {
    rows.iter().fold(seed, |prev, r| row_digest(&prev, r))
}

/// The last digest of the architectures chain from `seed`.
pub fn architecture_chain(seed: Digest, rows: &[(u64, String)]) -> Digest {
    rows.iter().fold(seed, |prev, (id, json)| {
        architecture_digest(&prev, *id, json)
    })
}

/// The end of one dataset's chain, as `primary.h5` records it at a clean stop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainEnd {
    /// The dataset.
    pub dataset: String,
    /// Its rows.
    pub rows: u64,
    /// Its last digest (the chain's seed for no rows), hex.
    pub digest: String,
}

impl ChainEnd {
    /// The end of `dataset`'s chain after `rows` rows ending in `last`.
    pub fn new(dataset: &str, rows: u64, last: &Digest) -> ChainEnd {
        ChainEnd {
            dataset: dataset.into(),
            rows,
            digest: hex(last),
        }
    }
}

/// A group's file as the primary recorded it at a clean stop: its ranks (the file's
/// `accelerators` attribute) and the end of each of its datasets' chains
/// ([`crate::schema::GROUP_DATASETS`] order). A group that wrote no rows has every chain
/// at its seed with 0 rows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupChain {
    /// The group.
    pub group: u32,
    /// Its ranks.
    pub ranks: u32,
    /// Its datasets' chain ends.
    pub chains: Vec<ChainEnd>,
}

impl GroupChain {
    /// Epoch rows the group wrote.
    pub fn epochs(&self) -> u64 {
        self.chains
            .iter()
            .find(|c| c.dataset == "epochs")
            .map_or(0, |c| c.rows)
    }
}

/// The run digest: SHA-256 over every sealed attribute of `primary.h5` (name, presence and
/// value, in [`crate::schema::PRIMARY_ATTRS`] order).
pub fn run_digest(attrs: &[(&str, Option<AttrValue>)]) -> Digest {
    let mut h = Sha256::new();
    h.update(b"aiperf-run-digest-3\0");
    let text = |h: &mut Sha256, t: &str| {
        h.update((t.len() as u64).to_le_bytes());
        h.update(t.as_bytes());
    };
    for (name, value) in attrs {
        text(&mut h, name);
        match value {
            None => h.update([0u8]),
            Some(AttrValue::U32(v)) => {
                h.update([1u8]);
                h.update(v.to_le_bytes());
            }
            Some(AttrValue::U64(v)) => {
                h.update([2u8]);
                h.update(v.to_le_bytes());
            }
            Some(AttrValue::F64(v)) => {
                h.update([3u8]);
                h.update(v.to_bits().to_le_bytes());
            }
            Some(AttrValue::Text(t)) => {
                h.update([4u8]);
                text(&mut h, t);
            }
        }
    }
    h.finalize().into()
}

/// Lower-case hex.
pub fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Which digest a reader is asked for, so that a malformed one is named right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// The run digest (`aiperf score --digest`).
    Run,
    /// The audit digest (`aiperf score --audit-digest`).
    Audit,
}

/// A 64-digit hex digest (either case), or why not (naming the `wanted` digest).
pub fn parse_hex(text: &str, wanted: Wanted) -> Result<Digest, String> {
    let t = text.trim();
    if t.len() != 64 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        let (name, origin) = match wanted {
            Wanted::Run => ("run digest", "in rank 0's closing log line of `aiperf run`"),
            Wanted::Audit => (
                "audit digest",
                "that `aiperf audit` printed when it wrote audit.h5",
            ),
        };
        return Err(format!(
            "{t:?} is not a SHA-256 digest ({} hex digits): give the 64 hex digits of the \"{name}\" {origin}",
            t.len()
        ));
    }
    let mut d = [0u8; 32];
    for (i, byte) in d.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).expect("hex digits");
    }
    Ok(d)
}

#[cfg(test)]
mod tests;
