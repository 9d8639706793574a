//! How an exchange is cut into buckets of whole tensors (the way PyTorch DDP buckets
//! gradients: a small first bucket, then about 25 MiB each), and which buckets may go while
//! backward reports gradients: a bucket goes once all its pieces are ready and every earlier
//! one has gone, so every rank reduces the same buckets in the same order.

use std::ops::Range;

use super::ExchangeConfig;

/// One bucket: the pieces (tensors) it holds and its elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Indices of the pieces, consecutive.
    pub pieces: Range<usize>,
    /// Elements, Σ of the pieces' sizes.
    pub elems: usize,
}

/// Splits pieces of `sizes` elements (in order) into buckets of whole pieces: each closed
/// once it holds at least the cap (the first bucket's cap for the first).
pub fn plan(sizes: &[usize], cfg: &ExchangeConfig) -> Vec<Bucket> {
    let cap = |first: bool| {
        let bytes = if first {
            cfg.first_bucket_bytes
        } else {
            cfg.bucket_bytes
        };
        (bytes / 4).max(1) as usize
    };
    let mut out = Vec::new();
    let (mut start, mut elems) = (0, 0);
    for (i, &n) in sizes.iter().enumerate() {
        elems += n;
        if elems >= cap(out.is_empty()) {
            out.push(Bucket {
                pieces: start..i + 1,
                elems,
            });
            (start, elems) = (i + 1, 0);
        }
    }
    if start < sizes.len() {
        out.push(Bucket {
            pieces: start..sizes.len(),
            elems,
        });
    }
    out
}

/// Which buckets may go: a bucket goes once all its pieces are ready and every earlier
/// bucket has gone, so every rank hands them over in the same order.
pub(super) struct Readiness {
    /// Each piece's bucket.
    bucket_of: Vec<usize>,
    /// Each bucket's pieces not yet ready.
    missing: Vec<usize>,
    /// Pieces reported (a second report of one is ignored).
    seen: Vec<bool>,
    /// The first bucket not yet handed over.
    next: usize,
}

impl Readiness {
    /// Nothing ready yet, for `plan`'s buckets of `pieces` pieces.
    pub(super) fn new(plan: &[Bucket], pieces: usize) -> Readiness {
        let mut bucket_of = vec![0; pieces];
        for (k, b) in plan.iter().enumerate() {
            bucket_of[b.pieces.clone()].fill(k);
        }
        Readiness {
            bucket_of,
            missing: plan.iter().map(|b| b.pieces.len()).collect(),
            seen: vec![false; pieces],
            next: 0,
        }
    }

    /// Piece `i` is ready: the buckets that may go now, in order.
    pub(super) fn ready(&mut self, i: usize) -> Range<usize> {
        if i < self.seen.len() && !std::mem::replace(&mut self.seen[i], true) {
            self.missing[self.bucket_of[i]] -= 1;
        }
        let from = self.next;
        while self.next < self.missing.len() && self.missing[self.next] == 0 {
            self.next += 1;
        }
        from..self.next
    }

    /// Backward has returned: every bucket not yet gone, in order.
    pub(super) fn rest(&mut self) -> Range<usize> {
        let from = self.next;
        self.next = self.missing.len();
        from..self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{ExchangeMethod, Staging};

    fn cfg(first: u64, rest: u64) -> ExchangeConfig {
        ExchangeConfig {
            method: ExchangeMethod::Allreduce,
            bucket_bytes: rest,
            first_bucket_bytes: first,
            staging: Staging::Auto,
            overlap: true,
        }
    }

    #[test]
    fn buckets_hold_whole_pieces_with_a_small_first_one() {
        // Caps of 4 and 8 elements (16 and 32 bytes).
        let b = plan(&[3, 2, 5, 1, 1, 9, 2], &cfg(16, 32));
        let pieces: Vec<Range<usize>> = b.iter().map(|b| b.pieces.clone()).collect();
        assert_eq!(pieces, vec![0..2, 2..6, 6..7]);
        assert_eq!(b.iter().map(|b| b.elems).collect::<Vec<_>>(), [5, 16, 2]);
        // A piece at or above the cap on an empty bucket is a bucket of its own.
        let b = plan(&[9, 1], &cfg(16, 32));
        assert_eq!(b[0].pieces, 0..1);
        assert!(plan(&[], &cfg(16, 32)).is_empty());
        // A cap of 0 bytes: one piece per bucket.
        assert_eq!(plan(&[1, 1], &cfg(0, 0)).len(), 2);
        // The default: ResNet-50's 25.6 M parameters make about four buckets.
        let r50 = vec![25_557_032 / 100; 100];
        let n = plan(&r50, &ExchangeConfig::default()).len();
        assert!((4..=6).contains(&n), "{n}");
    }

    fn three_buckets() -> Vec<Bucket> {
        // Pieces 0-1, 2, 3-4 (the flag last).
        [0..2, 2..3, 3..5]
            .into_iter()
            .map(|pieces| Bucket {
                elems: pieces.len(),
                pieces,
            })
            .collect()
    }

    #[test]
    fn buckets_go_in_order_once_complete() {
        let mut r = Readiness::new(&three_buckets(), 5);
        assert_eq!(r.ready(2), 0..0, "bucket 1 waits for bucket 0");
        assert_eq!(r.ready(1), 0..0);
        assert_eq!(r.ready(1), 0..0, "a second report counts once");
        assert_eq!(
            r.ready(0),
            0..2,
            "bucket 0 completes: 0 and the waiting 1 go"
        );
        assert_eq!(r.ready(3), 2..2);
        assert_eq!(r.rest(), 2..3, "backward returned: the flag's bucket goes");
        assert_eq!(r.rest(), 3..3);
    }

    #[test]
    fn the_flag_ready_first_lets_the_last_bucket_go_before_backward_returns() {
        let mut r = Readiness::new(&three_buckets(), 5);
        assert_eq!(r.ready(4), 0..0);
        for i in 0..3 {
            r.ready(i);
        }
        assert_eq!(
            r.ready(3),
            2..3,
            "the last bucket goes with its last gradient"
        );
        assert_eq!(r.rest(), 3..3, "nothing left for after backward");
        assert_eq!(r.ready(99), 3..3, "an unknown piece changes nothing");
    }
}
