//! The node-aware exchange (`--exchange hierarchical`), as Horovod's and NCCL's
//! hierarchical all-reduce: with L ranks on every node, a bucket is cut into L shards;
//! shard i is summed onto the node's rank i over shared memory (`MPI_Reduce` on the node's
//! communicator, from `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`), all-reduced across the
//! nodes among the ranks i only — every rank sends 1/L of the bucket over the network, all
//! at once — and gathered back inside the node (`MPI_Allgatherv` in place). Shard i's
//! bytes come from one all-reduce and are copied unchanged, so every rank holds
//! bit-identical sums. Nodes with different rank counts cannot share a shard layout: there
//! the bucket is summed onto each node's first rank, all-reduced among those, and broadcast
//! back. The communicators are built once per trial (or sweep) by [`register`],
//! collectively, and found again by the group communicator's handle while the returned
//! guard lives.

use std::cell::RefCell;
use std::rc::Rc;

use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::Communicator;

use super::exchange::{ExchangeConfig, ExchangeMethod};
use super::inplace::{self, RawComm};

/// How a group lies over its nodes.
pub struct Layout {
    /// This rank's node: the group's ranks that share its memory.
    pub node: SimpleCommunicator,
    /// Nodes the group spans.
    pub nodes: u32,
    /// The fewest ranks on one of them.
    pub least: u32,
    /// The most ranks on one of them.
    pub most: u32,
}

/// Splits `comm` by node and counts the nodes and their ranks (collective over `comm`; the
/// counts are the same on every rank).
pub fn layout<C: Communicator>(comm: &C) -> Layout {
    use mpi::collective::{CommunicatorCollectives, SystemOperation};
    let node = comm.split_shared(comm.rank());
    let first = i32::from(node.rank() == 0);
    let (mut nodes, mut least, mut most) = (0i32, 0i32, 0i32);
    comm.all_reduce_into(&first, &mut nodes, SystemOperation::sum());
    comm.all_reduce_into(&node.size(), &mut least, SystemOperation::min());
    comm.all_reduce_into(&node.size(), &mut most, SystemOperation::max());
    Layout {
        node,
        nodes: nodes as u32,
        least: least as u32,
        most: most as u32,
    }
}

/// A group's communicators for the node-aware exchange.
pub struct Topology {
    /// This rank's node: the group's ranks that share its memory.
    node: SimpleCommunicator,
    /// Across the nodes: with equal nodes, the ranks of this rank's node index (shards);
    /// otherwise, on each node's first rank, the first ranks (and none elsewhere).
    across: Option<SimpleCommunicator>,
    /// Whether every node has the same number of ranks (the sharded layout).
    sharded: bool,
}

impl Topology {
    /// Splits `comm` by node (collective over `comm`).
    pub fn of<C: Communicator>(comm: &C) -> Topology {
        let Layout {
            node, least, most, ..
        } = layout(comm);
        let sharded = least == most;
        let color = if sharded {
            Color::with_value(node.rank())
        } else if node.rank() == 0 {
            Color::with_value(0)
        } else {
            Color::undefined()
        };
        let across = comm.split_by_color_with_key(color, comm.rank());
        Topology {
            node,
            across,
            sharded,
        }
    }

    /// Ranks on this rank's node.
    pub fn node_size(&self) -> usize {
        self.node.size() as usize
    }

    /// Sums `len` f32s at `data` over the group. When the bucket `follows` another of the
    /// same exchange and holds [`inplace::SYNC_BYTES`] or more, the step across the nodes
    /// waits at a barrier first, as the flat exchange does: the node's shards cross its link
    /// together, so the whole bucket counts.
    ///
    /// # Safety
    /// As [`inplace::allreduce_raw`].
    pub unsafe fn allreduce_raw(&self, data: *mut f32, len: usize, follows: bool) {
        if self.sharded {
            self.sharded_allreduce(data, len, follows);
        } else {
            self.leader_allreduce(data, len, follows);
        }
    }

    /// Reduce shard i onto node rank i, all-reduce it among the ranks i of every node,
    /// gather the shards inside the node.
    unsafe fn sharded_allreduce(&self, data: *mut f32, len: usize, follows: bool) {
        let l = self.node_size();
        let bounds: Vec<usize> = (0..=l).map(|i| i * len / l).collect();
        if l > 1 {
            for i in 0..l {
                let shard = data.add(bounds[i]);
                inplace::reduce_raw_to(&self.node, shard, bounds[i + 1] - bounds[i], i as i32);
            }
        }
        let me = self.node.rank() as usize;
        if let Some(across) = self.across.as_ref().filter(|a| a.size() > 1) {
            if inplace::waits(len, follows) {
                ffi::MPI_Barrier(across.as_raw());
            }
            inplace::allreduce_raw(across, data.add(bounds[me]), bounds[me + 1] - bounds[me]);
        }
        if l > 1 {
            inplace::allgatherv_raw(&self.node, data, &bounds);
        }
    }

    /// Reduce onto the node's first rank, all-reduce among the first ranks, broadcast.
    unsafe fn leader_allreduce(&self, data: *mut f32, len: usize, follows: bool) {
        let on_node = self.node.size() > 1;
        if on_node {
            inplace::reduce_raw(&self.node, data, len);
        }
        if let Some(leaders) = self.across.as_ref().filter(|l| l.size() > 1) {
            inplace::allreduce_bucket(leaders.as_raw(), data, len, follows);
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
