//! Tamper evidence (DESIGN.md §6, schema 2): every epoch row carries a running SHA-256
//! digest of the previous row's digest and this row's fields; at a clean stop `primary.h5`
//! holds each group's row count and last digest, and a run digest over the recorded
//! configuration, dataset identity, search record, start time and those group digests —
//! the digest rank 0 prints in its closing log line and a reviewer checks with
//! `aiperf score --digest HEX`.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::schema::EpochRow;

/// A SHA-256 digest.
pub type Digest = [u8; 32];

/// The start of group `group`'s chain (the "previous digest" of its first row).
pub fn chain_seed(group: u32) -> Digest {
    let mut h = Sha256::new();
    h.update(b"aiperf-epoch-chain-2\0");
    h.update(group.to_le_bytes());
    h.finalize().into()
}

/// The digest of `row` after `prev`: SHA-256 of `prev` and every field of the row but its
/// digest, little-endian, in schema order.
pub fn row_digest(prev: &Digest, row: &EpochRow) -> Digest {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(row.time_s.to_bits().to_le_bytes());
    for v in [row.trial, row.model_id] {
        h.update(v.to_le_bytes());
    }
    h.update(row.epoch.to_le_bytes());
    for v in [
        row.train_images,
        row.steps,
        row.val_images,
        row.train_ops,
        row.val_ops,
    ] {
        h.update(v.to_le_bytes());
    }
    for v in [
        row.train_loss,
        row.val_loss,
        row.val_accuracy,
        row.compute_s,
        row.allreduce_s,
    ] {
        h.update(v.to_bits().to_le_bytes());
    }
    h.update(row.allreduce_bytes.to_le_bytes());
    h.update(row.data_wait_s.to_bits().to_le_bytes());
    h.finalize().into()
}

/// Fills in the digests of `rows`, which follow a chain whose last digest is `prev`;
/// returns the new last digest.
pub fn seal(prev: Digest, rows: &mut [EpochRow]) -> Digest {
    rows.iter_mut().fold(prev, |prev, r| {
        r.digest = row_digest(&prev, r);
        r.digest
    })
}

/// The first row (index from 0) whose digest does not follow from its contents and the
/// rows before it; `None` when the chain is intact.
pub fn first_broken(group: u32, rows: &[EpochRow]) -> Option<usize> {
    let mut prev = chain_seed(group);
    for (i, r) in rows.iter().enumerate() {
        if row_digest(&prev, r) != r.digest {
            return Some(i);
        }
        prev = r.digest;
    }
    None
}

/// The last digest of a group's chain (its seed when it has no rows).
pub fn last(group: u32, rows: &[EpochRow]) -> Digest {
    rows.last().map_or_else(|| chain_seed(group), |r| r.digest)
}

/// A group's chain as the primary recorded it at a clean stop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupChain {
    /// The group.
    pub group: u32,
    /// Epoch rows it wrote.
    pub epochs: u64,
    /// Its last digest, hex.
    pub digest: String,
}

/// The run digest: SHA-256 over the attributes that decide the verdict and every group's
/// chain, in group order.
pub fn run_digest(
    rules_version: &str,
    config_json: &str,
    dataset_json: &str,
    search_json: &str,
    start_time_s: f64,
    chains: &[GroupChain],
) -> Digest {
    let mut h = Sha256::new();
    h.update(b"aiperf-run-digest-2\0");
    for text in [rules_version, config_json, dataset_json, search_json] {
        h.update((text.len() as u64).to_le_bytes());
        h.update(text.as_bytes());
    }
    h.update(start_time_s.to_bits().to_le_bytes());
    for c in chains {
        h.update(c.group.to_le_bytes());
        h.update(c.epochs.to_le_bytes());
        h.update(c.digest.as_bytes());
    }
    h.finalize().into()
}

/// Lower-case hex.
pub fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// A 64-digit hex digest (either case), or why not.
pub fn parse_hex(text: &str) -> Result<Digest, String> {
    let t = text.trim();
    if t.len() != 64 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "{t:?} is not a SHA-256 digest: give the 64 hex digits of the \"run digest\" in rank 0's closing log line"
        ));
    }
    let mut d = [0u8; 32];
    for (i, byte) in d.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).expect("hex digits");
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: u64) -> EpochRow {
        EpochRow {
            time_s: 1000.0 + i as f64,
            trial: 0,
            model_id: i,
            epoch: 1,
            train_images: 10,
            steps: 2,
            val_images: 5,
            train_ops: 100,
            val_ops: 10,
            train_loss: 1.0,
            val_loss: 1.0,
            val_accuracy: 0.5,
            compute_s: 1.0,
            allreduce_s: 0.0,
            allreduce_bytes: 0,
            data_wait_s: 0.0,
            digest: [0; 32],
        }
    }

    #[test]
    fn a_sealed_chain_is_intact_and_any_changed_field_breaks_it_at_that_row() {
        let mut rows: Vec<_> = (0..4).map(row).collect();
        let last_digest = seal(chain_seed(1), &mut rows);
        assert_eq!(first_broken(1, &rows), None);
        assert_eq!(last(1, &rows), last_digest);
        // Another group's seed: broken from the first row.
        assert_eq!(first_broken(2, &rows), Some(0));
        let edits: [fn(&mut EpochRow); 5] = [
            |r| r.train_ops += 1,
            |r| r.val_accuracy = 0.99,
            |r| r.time_s -= 1e-6,
            |r| r.steps = 1,
            |r| r.data_wait_s = 1.0,
        ];
        for edit in edits {
            let mut altered = rows.clone();
            edit(&mut altered[2]);
            assert_eq!(first_broken(1, &altered), Some(2));
        }
        // A removed row breaks the one after it.
        let mut cut = rows.clone();
        cut.remove(1);
        assert_eq!(first_broken(1, &cut), Some(1));
    }

    #[test]
    fn the_run_digest_covers_every_input_and_hex_round_trips() {
        let chain = |d: &str| GroupChain {
            group: 0,
            epochs: 3,
            digest: d.into(),
        };
        let base = run_digest("r", "{}", "{}", "{}", 1.0, &[chain("ab")]);
        assert_ne!(
            base,
            run_digest("r", "{ }", "{}", "{}", 1.0, &[chain("ab")])
        );
        assert_ne!(base, run_digest("r", "{}", "{}", "{}", 1.5, &[chain("ab")]));
        assert_ne!(base, run_digest("r", "{}", "{}", "{}", 1.0, &[chain("ac")]));
        assert_ne!(base, run_digest("r", "{}", "{}", "{}", 1.0, &[]));
        assert_eq!(parse_hex(&hex(&base)).unwrap(), base);
        assert_eq!(parse_hex(&hex(&base).to_uppercase()).unwrap(), base);
        assert!(parse_hex("abc").unwrap_err().contains("64 hex digits"));
        assert!(parse_hex(&"g".repeat(64)).is_err());
    }
}
