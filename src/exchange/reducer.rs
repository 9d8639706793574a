//! What sums one bucket over a group: the flat in-place all-reduce on the group's
//! communicator, or the node-aware one on the communicators it splits off per node
//! ([`super::node_aware`]). A value built once per trial (or sweep), collectively, and passed
//! to whatever reduces; the method is matched here and nowhere else.

use std::marker::PhantomData;

use mpi::ffi;

use super::calls::{self, RawComm};
use super::node_aware::Topology;
use super::ExchangeMethod;

/// The reducer of one group, valid while its communicator `'c` lives.
pub struct Reducer<'c> {
    kind: Kind,
    _comm: PhantomData<&'c ()>,
}

enum Kind {
    /// The group's communicator.
    Flat(ffi::MPI_Comm),
    /// The group's node and cross-node communicators.
    NodeAware(Topology),
}

impl<'c> Reducer<'c> {
    /// The reducer of `method` over `comm` (collective over `comm` for the node-aware one,
    /// which splits it by node); `None` for `auto`, which names no reducer until
    /// [`super::resolve_auto`] has settled it. The one place a method is matched.
    pub fn new<C: RawComm>(comm: &'c C, method: ExchangeMethod) -> Option<Reducer<'c>> {
        let kind = match method {
            ExchangeMethod::Hierarchical => Kind::NodeAware(Topology::of(comm)),
            ExchangeMethod::Allreduce => Kind::Flat(comm.as_raw()),
            ExchangeMethod::Auto => return None,
        };
        Some(Reducer {
            kind,
            _comm: PhantomData,
        })
    }

    /// Sums the `len` f32s at `data` over the group, in place. A bucket that `follows`
    /// another of the same exchange and holds [`calls::SYNC_BYTES`] or more waits at a
    /// barrier first (the flat and the node-aware reducer alike).
    ///
    /// # Safety
    /// `data` must be valid for `len` f32s that MPI can read and write (host memory, or
    /// device memory with a CUDA-aware MPI, every kernel writing it completed), used by
    /// nothing else until this returns; no other thread may make MPI calls on the group's
    /// communicators meanwhile.
    pub(super) unsafe fn reduce(&self, data: *mut f32, len: usize, follows: bool) {
        match &self.kind {
            Kind::Flat(comm) => calls::allreduce_bucket(*comm, data, len, follows),
            Kind::NodeAware(t) => t.allreduce_raw(data, len, follows),
        }
    }
}
