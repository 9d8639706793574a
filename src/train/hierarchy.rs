//! The node-aware exchange (`--exchange hierarchical`): a bucket is summed onto each node's
//! first rank over shared memory (`MPI_Reduce` on the node's communicator, from
//! `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`), all-reduced among those first ranks only
//! (one rank per node crosses the network), then broadcast inside the node — every rank
//! ends with its node leader's bytes, and the leaders' all-reduce gives every leader the
//! same, so all ranks hold bit-identical sums. The communicators are built once per trial
//! (or sweep) by [`register`], collectively, and found again by the group communicator's
//! handle while the returned guard lives.

use std::cell::RefCell;
use std::rc::Rc;

use mpi::ffi;
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::Communicator;

use super::exchange::{ExchangeConfig, ExchangeMethod};
use super::inplace::{self, RawComm};

/// A group's communicators for the node-aware exchange.
pub struct Topology {
    /// This rank's node: the group's ranks that share its memory.
    node: SimpleCommunicator,
    /// On each node's first rank: the first ranks of every node; elsewhere none.
    leaders: Option<SimpleCommunicator>,
}

impl Topology {
    /// Splits `comm` by node (collective over `comm`).
    pub fn of<C: Communicator>(comm: &C) -> Topology {
        let node = comm.split_shared(comm.rank());
        let color = if node.rank() == 0 {
            Color::with_value(0)
        } else {
            Color::undefined()
        };
        let leaders = comm.split_by_color_with_key(color, comm.rank());
        Topology { node, leaders }
    }

    /// Ranks on this rank's node.
    pub fn node_size(&self) -> usize {
        self.node.size() as usize
    }

    /// Nodes of the group (known on node leaders; 0 elsewhere).
    pub fn nodes(&self) -> usize {
        self.leaders.as_ref().map_or(0, |l| l.size() as usize)
    }

    /// Sums `len` f32s at `data` over the group: reduce onto the node's first rank, all-reduce
    /// among the first ranks, broadcast inside the node.
    ///
    /// # Safety
    /// As [`inplace::allreduce_raw`].
    pub unsafe fn allreduce_raw(&self, data: *mut f32, len: usize) {
        let on_node = self.node.size() > 1;
        if on_node {
            inplace::reduce_raw(&self.node, data, len);
        }
        if let Some(leaders) = self.leaders.as_ref().filter(|l| l.size() > 1) {
            inplace::allreduce_raw(leaders, data, len);
        }
        if on_node {
            inplace::bcast_raw(&self.node, data, len);
        }
    }
}

thread_local! {
    /// The topologies registered on this thread, by their group communicator's handle.
    static REGISTERED: RefCell<Vec<(ffi::MPI_Comm, Rc<Topology>)>> = const { RefCell::new(Vec::new()) };
}

/// Keeps a group's topology registered; dropping it unregisters it.
pub struct Registered {
    handle: ffi::MPI_Comm,
}

impl Drop for Registered {
    fn drop(&mut self) {
        REGISTERED.with(|r| {
            let mut r = r.borrow_mut();
            if let Some(at) = r.iter().rposition(|(h, _)| *h == self.handle) {
                r.remove(at);
            }
        });
    }
}

/// Builds and registers `comm`'s topology when `cfg` asks for the node-aware exchange
/// (collective over `comm`; every rank of the group calls it at the same point).
pub fn register<C: RawComm>(comm: &C, cfg: &ExchangeConfig) -> Option<Registered> {
    (cfg.method == ExchangeMethod::Hierarchical).then(|| {
        let topo = Rc::new(Topology::of(comm));
        let handle = comm.as_raw();
        REGISTERED.with(|r| r.borrow_mut().push((handle, topo)));
        Registered { handle }
    })
}

/// The topology registered for `comm`. Its absence is a bug of the caller (every path that
/// exchanges registers first), so it panics, which aborts the whole job with the message.
pub fn topology_of<C: RawComm>(comm: &C) -> Rc<Topology> {
    let handle = comm.as_raw();
    REGISTERED.with(|r| {
        r.borrow()
            .iter()
            .rev()
            .find(|(h, _)| *h == handle)
            .map(|(_, t)| Rc::clone(t))
            .expect("the hierarchical exchange's communicators are registered before it runs")
    })
}
