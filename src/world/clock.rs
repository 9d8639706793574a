//! The run's common clock: rank 0's Unix time. At start every rank's offset to rank 0 is
//! measured by ping-pong (Cristian's algorithm: of several round trips, the one with the
//! shortest round-trip time, assuming the reply's midpoint), so records written on any
//! node carry times on rank 0's clock.

use mpi::collective::Root;
use mpi::point_to_point::{Destination, Source};
use mpi::traits::Communicator;

/// Round trips per rank.
const PINGS: usize = 8;

/// A rank's view of the common clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Clock {
    /// This rank's clock minus rank 0's, seconds.
    pub offset_s: f64,
    /// Half the best round trip to rank 0: the uncertainty of the offset.
    pub uncertainty_s: f64,
}

impl Clock {
    /// Now on the common clock.
    pub fn now(&self) -> f64 {
        crate::host::unix_s() - self.offset_s
    }
}

/// Measures every rank's offset to rank 0 (collective). Returns this rank's clock and, on
/// every rank, all offsets and uncertainties by rank.
pub fn synchronise<C: Communicator>(world: &C) -> (Clock, Vec<(f64, f64)>) {
    let (rank, size) = (world.rank(), world.size());
    let mut table = vec![0f64; 2 * size as usize];
    if rank == 0 {
        for r in 1..size {
            let peer = world.process_at_rank(r);
            let mut best = (f64::INFINITY, 0.0);
            for _ in 0..PINGS {
                let sent = crate::host::unix_s();
                peer.send(&[sent][..]);
                let (remote, _) = peer.receive::<f64>();
                let back = crate::host::unix_s();
                let rtt = back - sent;
                if rtt < best.0 {
                    best = (rtt, remote - 0.5 * (sent + back));
                }
            }
            table[2 * r as usize] = best.1;
            table[2 * r as usize + 1] = 0.5 * best.0;
        }
    } else {
        let root = world.process_at_rank(0);
        for _ in 0..PINGS {
            let (_, _) = root.receive_vec::<f64>();
            root.send(&crate::host::unix_s());
        }
    }
    world.process_at_rank(0).broadcast_into(&mut table[..]);
    let all: Vec<(f64, f64)> = table.chunks_exact(2).map(|p| (p[0], p[1])).collect();
    let mine = all[rank as usize];
    (
        Clock {
            offset_s: mine.0,
            uncertainty_s: mine.1,
        },
        all,
    )
}
