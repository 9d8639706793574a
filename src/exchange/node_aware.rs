//! The node-aware exchange (`--exchange hierarchical`), as Horovod's and NCCL's
//! hierarchical all-reduce: with L ranks on every node, a bucket is cut into L shards;
//! shard i is summed onto the node's rank i over shared memory (`MPI_Reduce` on the node's
//! communicator, from `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`), all-reduced across the
//! nodes among the ranks i only — every rank sends 1/L of the bucket over the network, all
//! at once — and gathered back inside the node (`MPI_Allgatherv` in place). Shard i's
//! bytes come from one all-reduce and are copied unchanged, so every rank holds
//! bit-identical sums. Nodes with different rank counts cannot share a shard layout: there
//! the bucket is summed onto each node's first rank, all-reduced among those, and broadcast
//! back. The communicators are built once per trial (or sweep), collectively, and held by
//! the exchange's [`super::Reducer`].

use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::Communicator;

use super::calls;

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
pub(super) struct Topology {
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
    pub(super) fn of<C: Communicator>(comm: &C) -> Topology {
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
    pub(super) fn node_size(&self) -> usize {
        self.node.size() as usize
    }

    /// Sums `len` f32s at `data` over the group. When the bucket `follows` another of the
    /// same exchange and holds [`calls::SYNC_BYTES`] or more, the step across the nodes
    /// waits at a barrier first, as the flat exchange does: the node's shards cross its link
    /// together, so the whole bucket counts.
    ///
    /// # Safety
    /// As [`calls::allreduce_raw`].
    pub(super) unsafe fn allreduce_raw(&self, data: *mut f32, len: usize, follows: bool) {
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
                calls::reduce_raw_to(&self.node, shard, bounds[i + 1] - bounds[i], i as i32);
            }
        }
        let me = self.node.rank() as usize;
        if let Some(across) = self.across.as_ref().filter(|a| a.size() > 1) {
            if calls::waits(len, follows) {
                ffi::MPI_Barrier(across.as_raw());
            }
            calls::allreduce_raw(across, data.add(bounds[me]), bounds[me + 1] - bounds[me]);
        }
        if l > 1 {
            calls::allgatherv_raw(&self.node, data, &bounds);
        }
    }

    /// Reduce onto the node's first rank, all-reduce among the first ranks, broadcast.
    unsafe fn leader_allreduce(&self, data: *mut f32, len: usize, follows: bool) {
        let on_node = self.node.size() > 1;
        if on_node {
            calls::reduce_raw(&self.node, data, len);
        }
        if let Some(leaders) = self.across.as_ref().filter(|l| l.size() > 1) {
            calls::allreduce_bucket(leaders.as_raw(), data, len, follows);
        }
        if on_node {
            calls::bcast_raw(&self.node, data, len);
        }
    }
}
