//! Moving bytes and values between ranks: the primary's probe/receive over any source (the
//! probed size checked before anything is allocated), a leader's request and reply, serde
//! broadcasts within a communicator, and variable-size string gathers.

use std::time::{Duration, Instant};

use mpi::collective::{CommunicatorCollectives, Root};
use mpi::datatype::PartitionMut;
use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::traits::{Communicator, Equivalence};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::protocol::{decode, encode, ProtocolError, ToGroup, ToPrimary, DEFAULT_LIMIT_BYTES};

/// A message that could not be moved or understood.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A message larger than the protocol allows (refused before allocating it).
    #[error("rank {from} sent a message of {size} bytes, over the limit of {limit} bytes (mismatched aiperf builds?)")]
    TooLarge {
        /// The sender's rank.
        from: i32,
        /// Its size.
        size: u64,
        /// The limit.
        limit: usize,
    },
    /// A message that does not decode.
    #[error("message from rank {from}: {source}")]
    Protocol {
        /// The sender's rank.
        from: i32,
        /// Why it does not decode.
        source: ProtocolError,
    },
    /// A broadcast value that does not encode or decode.
    #[error("broadcast value: {0}")]
    Value(String),
    /// The primary did not answer a request within the stall timeout: it is gone, frozen or
    /// cut off from this rank's host.
    #[error("no answer from the primary (rank 0 on {host}) for {waited_s:.0} s (--stall-timeout): it is gone, frozen or cut off from this host; this group stops and ends the job")]
    PrimarySilent {
        /// The primary's host.
        host: String,
        /// How long this rank waited.
        waited_s: f64,
    },
}

/// The next message from any rank, without spinning a core (the primary usually shares a
/// node with training ranks): probes, sleeping between probes (up to 1 ms) while none waits.
/// `Ok(None)` after `wait` without a message. A message over `limit` bytes is refused by its
/// probed size, before a buffer is allocated for it.
pub fn receive_any<C: Communicator>(
    world: &C,
    wait: Duration,
    limit: usize,
) -> Result<Option<(Vec<u8>, i32)>, TransportError> {
    // A plain probe leaves the message queued: one over the limit is refused without
    // receiving it; one within is then received from its sender (MPI keeps a sender's
    // messages in order, so it is the one probed).
    let Some(status) = poll(Some(wait), || world.any_process().immediate_probe()) else {
        return Ok(None);
    };
    let size = u64::try_from(status.count(u8::equivalent_datatype())).unwrap_or(u64::MAX);
    let from = status.source_rank();
    if size > limit as u64 {
        return Err(TransportError::TooLarge { from, size, limit });
    }
    let (bytes, _) = world.process_at_rank(from).receive_vec::<u8>();
    Ok(Some((bytes, from)))
}

/// Calls `attempt` until it gives a value, sleeping between calls (20 µs, doubling up to
/// 1 ms) so that a waiting rank does not spin a core; `None` once `limit` has passed.
fn poll<T>(limit: Option<Duration>, mut attempt: impl FnMut() -> Option<T>) -> Option<T> {
    let started = Instant::now();
    let mut pause = Duration::from_micros(20);
    loop {
        if let Some(v) = attempt() {
            return Some(v);
        }
        if limit.is_some_and(|l| started.elapsed() >= l) {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// A barrier over `world` that does not spin a core while it waits (tests a non-blocking
/// barrier, sleeping up to 1 ms between tests): for ranks that wait while others measure.
pub fn quiet_barrier<C: Communicator>(world: &C) {
    use mpi::collective::CommunicatorCollectives;
    let mut request = Some(world.immediate_barrier());
    poll(None, || match request.take()?.test() {
        Ok(_) => Some(()),
        Err(r) => {
            request = Some(r);
            None
        }
    });
}

/// Sends a message to the primary (world rank 0) without waiting for an answer.
pub fn tell<C: Communicator>(world: &C, msg: &ToPrimary) {
    world.process_at_rank(0).send(&encode(msg)[..]);
}

/// How long a leader waits for the primary's answer, and where the primary runs (for the
/// message when it does not answer).
#[derive(Clone, Debug)]
pub struct Patience {
    /// The longest wait for one answer (the run's --stall-timeout).
    pub wait: Duration,
    /// The primary's host.
    pub host: String,
}

/// Sends a request to the primary and waits for its answer (size-checked before receiving),
/// at most `patience.wait`: a primary cut off from this host would otherwise leave the group
/// training (and writing its records) alone, with nobody to stop it. Waits without spinning
/// a core, as [`receive_any`].
pub fn ask<C: Communicator>(
    world: &C,
    msg: &ToPrimary,
    patience: &Patience,
) -> Result<ToGroup, TransportError> {
    tell(world, msg);
    let root = world.process_at_rank(0);
    let started = Instant::now();
    let Some((message, status)) = poll(Some(patience.wait), || root.immediate_matched_probe())
    else {
        return Err(TransportError::PrimarySilent {
            host: patience.host.clone(),
            waited_s: started.elapsed().as_secs_f64(),
        });
    };
    let size = u64::try_from(status.count(u8::equivalent_datatype())).unwrap_or(u64::MAX);
    if size > DEFAULT_LIMIT_BYTES as u64 {
        return Err(TransportError::TooLarge {
            from: 0,
            size,
            limit: DEFAULT_LIMIT_BYTES,
        });
    }
    let (bytes, _) = (message, status).matched_receive_vec::<u8>();
    decode(&bytes, DEFAULT_LIMIT_BYTES)
        .map_err(|source| TransportError::Protocol { from: 0, source })
}

/// Ends the whole job from this rank with exit status `code` (`MPI_Abort` on the world),
/// once the reason is said: for a rank whose peers may sit in a collective it will never
/// join.
pub fn abort_job(code: i32) -> ! {
    // SAFETY: MPI is initialised (every caller runs inside a command that started it) and
    // MPI_Abort may be called from any thread; it does not return.
    unsafe {
        mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, code);
    }
    unreachable!("MPI_Abort returned")
}

/// Broadcasts a serde value from the communicator's rank 0 (length, then bincode bytes);
/// rank 0 passes `Some`, the others `None`; every rank gets the value. A length over the
/// protocol's limit is refused on every rank before allocating.
pub fn broadcast_value<G: Communicator, T: Serialize + DeserializeOwned>(
    comm: &G,
    value: Option<&T>,
) -> Result<T, TransportError> {
    let root = comm.process_at_rank(0);
    let config = bincode::config::standard();
    let mut bytes = match value {
        Some(v) => bincode::serde::encode_to_vec(v, config)
            .map_err(|e| TransportError::Value(e.to_string()))?,
        None => Vec::new(),
    };
    let mut len = [bytes.len() as u64];
    root.broadcast_into(&mut len[..]);
    if len[0] > DEFAULT_LIMIT_BYTES as u64 {
        return Err(TransportError::TooLarge {
            from: 0,
            size: len[0],
            limit: DEFAULT_LIMIT_BYTES,
        });
    }
    bytes.resize(len[0] as usize, 0);
    root.broadcast_into(&mut bytes[..]);
    bincode::serde::decode_from_slice(&bytes, config)
        .map(|(v, _)| v)
        .map_err(|e| TransportError::Value(e.to_string()))
}

/// Every rank's string, on every rank, through a variable-size gather (no padding, no
/// length limit beyond MPI's counts).
pub fn all_gather_strings<C: Communicator>(world: &C, mine: &str) -> Vec<String> {
    let size = world.size() as usize;
    let len = i32::try_from(mine.len()).unwrap_or(i32::MAX);
    let mut lens = vec![0i32; size];
    world.all_gather_into(&len, &mut lens[..]);
    let displs: Vec<i32> = lens
        .iter()
        .scan(0i32, |at, &l| {
            let d = *at;
            *at = at.saturating_add(l);
            Some(d)
        })
        .collect();
    let total: usize = lens.iter().map(|&l| l as usize).sum();
    if total == 0 {
        // Nothing to gather (OpenMPI refuses a gather of empty buffers).
        return vec![String::new(); size];
    }
    let mut all = vec![0u8; total];
    {
        let mut part = PartitionMut::new(&mut all[..], &lens[..], &displs[..]);
        world.all_gather_varcount_into(&mine.as_bytes()[..len as usize], &mut part);
    }
    displs
        .iter()
        .zip(&lens)
        .map(|(&d, &l)| String::from_utf8_lossy(&all[d as usize..(d + l) as usize]).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpi::request::WaitGuard;

    /// Regression: the primary received a whole message before checking its size. Here a
    /// singleton MPI world sends itself a message over the limit: it is refused by its
    /// probed size (this is the only test of the library that initialises MPI).
    #[test]
    fn regression_oversized_message_is_refused_by_its_probed_size() {
        let universe = mpi::initialize().expect("MPI initialises once per test process");
        let world = universe.world();
        let big = vec![7u8; 4096];
        mpi::request::scope(|scope| {
            let _sent = WaitGuard::from(world.process_at_rank(0).immediate_send(scope, &big[..]));
            let e = receive_any(&world, Duration::from_secs(5), 1024).unwrap_err();
            assert!(
                matches!(
                    e,
                    TransportError::TooLarge {
                        from: 0,
                        size: 4096,
                        limit: 1024
                    }
                ),
                "{e}"
            );
            // Within the limit it is received whole.
            let (bytes, from) = receive_any(&world, Duration::from_secs(5), 8192)
                .unwrap()
                .unwrap();
            assert_eq!((bytes.len(), from), (4096, 0));
        });
        assert_eq!(
            all_gather_strings(&world, "node-α"),
            vec!["node-α".to_string()]
        );
    }
}
