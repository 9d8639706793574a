//! The MPI calls the exchange makes, in place on f32 buffers through MPI's C API: rsmpi 0.8
//! has no `MPI_IN_PLACE`, so a C shim (`mpi_in_place.c`, compiled by build.rs against the
//! MPI headers) gives its value, which differs between MPI implementations. In place, a
//! bucket is reduced where it was filled: no send buffer and no copy of it inside MPI. Also
//! what the MPI library says of itself: CUDA-awareness and collectives that would crash.

use std::os::raw::{c_int, c_void};

use mpi::ffi;
use mpi::raw::AsRaw;

extern "C" {
    fn aiperf_mpi_in_place() -> *mut c_void;
    fn aiperf_mpi_cuda_aware() -> c_int;
    fn aiperf_mpi_cuda_aware_compiled() -> c_int;
    fn aiperf_mpi_cvar_int(name: *const std::os::raw::c_char) -> c_int;
}

/// Refuses an MPI whose collectives would crash on aiperf's in-place buffers: OpenMPI 4's
/// hierarchical component `coll_han`, once given a priority (it has none by default in
/// 4.1), faults on in-place all-reduces above 64 KiB (SIGSEGV, EFAULT on a 64 KiB segment;
/// reproduced with 4.1.4 outside aiperf). Read after `MPI_Init` through the MPI tool
/// interface, so `--mca`, `OMPI_MCA_*` and the MCA parameter files all count.
pub fn check_collectives() -> Result<(), String> {
    let library = mpi::environment::library_version().unwrap_or_default();
    if !library.contains("Open MPI v4.") {
        return Ok(());
    }
    let name = c"coll_han_priority";
    // SAFETY: a NUL-terminated name; the call only reads it.
    let priority = unsafe { aiperf_mpi_cvar_int(name.as_ptr()) };
    if priority > 0 {
        return Err(format!(
            "OpenMPI's hierarchical collectives (coll_han) are enabled (coll_han_priority = {priority}): in Open MPI 4 they crash on in-place all-reduces above 64 KiB, which aiperf's exchange makes; run with `--mca coll_han_priority 0` (or OMPI_MCA_coll_han_priority=0), and use `--exchange hierarchical` for aiperf's own node-aware exchange"
        ));
    }
    Ok(())
}

/// Whether the MPI library passes CUDA device memory itself (asked at run time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaAware {
    /// It says it does (OpenMPI's `MPIX_Query_cuda_support`).
    Yes,
    /// It says it does not.
    No,
    /// It has no way to say (not OpenMPI): treated as not.
    Unknown,
}

/// Asks the MPI library (after `MPI_Init`) whether it is CUDA-aware; `AIPERF_MPI_CUDA_AWARE`
/// = `0` or `1` overrides the answer (e.g. an MPICH or MVAPICH2 built with CUDA, which
/// cannot say).
pub fn cuda_aware() -> CudaAware {
    match std::env::var("AIPERF_MPI_CUDA_AWARE").as_deref() {
        Ok("1") => return CudaAware::Yes,
        Ok("0") => return CudaAware::No,
        _ => {}
    }
    // SAFETY: a query without arguments.
    match unsafe { aiperf_mpi_cuda_aware() } {
        1 => CudaAware::Yes,
        0 => CudaAware::No,
        _ => CudaAware::Unknown,
    }
}

/// Whether the MPI headers aiperf was compiled against describe a CUDA-aware build.
pub fn cuda_aware_compiled() -> bool {
    // SAFETY: a query without arguments.
    unsafe { aiperf_mpi_cuda_aware_compiled() != 0 }
}

/// A communicator whose raw handle the C calls take.
pub trait RawComm: AsRaw<Raw = ffi::MPI_Comm> + mpi::traits::Communicator {}
impl<T: AsRaw<Raw = ffi::MPI_Comm> + mpi::traits::Communicator> RawComm for T {}

/// A length as MPI's count (callers check the bound before filling anything).
fn count_of(len: usize) -> c_int {
    c_int::try_from(len).expect("exchange buffers are checked to fit an MPI count")
}

/// `MPI_Allreduce(MPI_IN_PLACE, buf, …, MPI_SUM)`: `buf` becomes the sum over `comm`.
pub fn allreduce<C: RawComm>(comm: &C, buf: &mut [f32]) {
    // SAFETY: `buf` is valid for its length for the whole (blocking) call.
    unsafe { allreduce_raw(comm, buf.as_mut_ptr(), buf.len()) }
}

/// [`allreduce`] of `len` f32s at `data`, which may be device memory that MPI can read.
///
/// # Safety
/// `data` must be valid for `len` f32s, read and written only by this call until it returns
/// (for device memory: every kernel writing it has completed). MPI's default error handler
/// aborts the job on failure, so the return code is always success.
pub(super) unsafe fn allreduce_raw<C: RawComm>(comm: &C, data: *mut f32, len: usize) {
    allreduce_handle(comm.as_raw(), data, len);
}

/// A bucket this large or larger that follows another bucket of the same exchange waits at a
/// barrier first. Back-to-back in-place all-reduces between two virtual-cluster nodes over
/// TCP lost 15–35 % of a single call's bandwidth from 2 MiB up, whatever the sizes or the
/// algorithm; one barrier between them restored it (docs/measurements.md). A barrier costs one
/// small message's latency: with the barrier from 1 MiB, a 2 MiB exchange (two 1 MiB
/// buckets) across the two nodes went from 0.82× to 0.98× of one raw call.
pub(super) const SYNC_BYTES: usize = 1 << 20;

/// One bucket of an exchange over a raw handle: [`allreduce_handle`], after a barrier when
/// the bucket `follows` another of the same exchange and holds at least [`SYNC_BYTES`]. Every
/// rank reduces the same buckets in the same order, so every rank makes the same calls.
///
/// # Safety
/// As [`allreduce_handle`].
pub(super) unsafe fn allreduce_bucket(
    comm: ffi::MPI_Comm,
    data: *mut f32,
    len: usize,
    follows: bool,
) {
    if waits(len, follows) {
        ffi::MPI_Barrier(comm);
    }
    allreduce_handle(comm, data, len);
}

/// Whether a bucket of `len` f32s that `follows` another (or not) waits at a barrier before
/// its reduction ([`SYNC_BYTES`]).
pub(super) fn waits(len: usize, follows: bool) -> bool {
    follows && len.saturating_mul(4) >= SYNC_BYTES
}

/// [`allreduce_raw`] over a raw communicator handle (for a communication thread).
///
/// # Safety
/// As [`allreduce_raw`]; `comm` must be a live communicator of this process that no other
/// thread uses meanwhile.
pub(super) unsafe fn allreduce_handle(comm: ffi::MPI_Comm, data: *mut f32, len: usize) {
    ffi::MPI_Allreduce(
        aiperf_mpi_in_place(),
        data.cast(),
        count_of(len),
        ffi::RSMPI_FLOAT,
        ffi::RSMPI_SUM,
        comm,
    );
}

/// The sum of `len` f32s at `data` onto `comm`'s rank 0, in place there.
///
/// # Safety
/// As [`allreduce_raw`]. On the root the send buffer is `MPI_IN_PLACE`; elsewhere `data` is
/// only read (the receive buffer is ignored off the root).
pub(super) unsafe fn reduce_raw<C: RawComm>(comm: &C, data: *mut f32, len: usize) {
    reduce_raw_to(comm, data, len, 0);
}

/// [`reduce_raw`] onto `root`.
///
/// # Safety
/// As [`reduce_raw`].
pub(super) unsafe fn reduce_raw_to<C: RawComm>(comm: &C, data: *mut f32, len: usize, root: c_int) {
    let data = data.cast::<c_void>();
    let send = if comm.rank() == root {
        aiperf_mpi_in_place()
    } else {
        data
    };
    ffi::MPI_Reduce(
        send,
        data,
        count_of(len),
        ffi::RSMPI_FLOAT,
        ffi::RSMPI_SUM,
        root,
        comm.as_raw(),
    );
}

/// Every rank's block of the f32s at `data` to every rank, in place: rank i's block is
/// `bounds[i]..bounds[i + 1]` (`bounds` has one more entry than `comm` has ranks).
///
/// # Safety
/// `data` must be valid for `bounds[size]` f32s, used by nothing else until this returns.
pub(super) unsafe fn allgatherv_raw<C: RawComm>(comm: &C, data: *mut f32, bounds: &[usize]) {
    let counts: Vec<c_int> = bounds.windows(2).map(|w| count_of(w[1] - w[0])).collect();
    let displs: Vec<c_int> = bounds[..bounds.len() - 1]
        .iter()
        .map(|&b| count_of(b))
        .collect();
    ffi::MPI_Allgatherv(
        aiperf_mpi_in_place(),
        0,
        ffi::RSMPI_DATATYPE_NULL,
        data.cast(),
        counts.as_ptr(),
        displs.as_ptr(),
        ffi::RSMPI_FLOAT,
        comm.as_raw(),
    );
}

/// `len` f32s at `data` broadcast from `comm`'s rank 0.
///
/// # Safety
/// As [`allreduce_raw`].
pub(super) unsafe fn bcast_raw<C: RawComm>(comm: &C, data: *mut f32, len: usize) {
    ffi::MPI_Bcast(
        data.cast(),
        count_of(len),
        ffi::RSMPI_FLOAT,
        0,
        comm.as_raw(),
    );
}
