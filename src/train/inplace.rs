//! In-place MPI collectives on f32 buffers through MPI's C API: rsmpi 0.8 has no
//! `MPI_IN_PLACE`, so a C shim (`mpi_in_place.c`, compiled by build.rs against the MPI
//! headers) gives its value, which differs between MPI implementations. In place, a bucket
//! is reduced where it was filled: no send buffer and no copy of it inside MPI.

use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};

use mpi::ffi;
use mpi::raw::AsRaw;

extern "C" {
    fn aiperf_mpi_in_place() -> *mut c_void;
}

/// A communicator whose raw handle the C calls take.
pub trait RawComm: AsRaw<Raw = ffi::MPI_Comm> + mpi::traits::Communicator {}
impl<T: AsRaw<Raw = ffi::MPI_Comm> + mpi::traits::Communicator> RawComm for T {}

/// A buffer's length as MPI's count (callers check the bound before filling anything).
fn count(buf: &[f32]) -> c_int {
    c_int::try_from(buf.len()).expect("exchange buffers are checked to fit an MPI count")
}

/// `MPI_Allreduce(MPI_IN_PLACE, buf, …, MPI_SUM)`: `buf` becomes the sum over `comm`.
pub fn allreduce<C: RawComm>(comm: &C, buf: &mut [f32]) {
    // SAFETY: `buf` is valid for `count(buf)` f32s for the whole (blocking) call; MPI's
    // default error handler aborts the job on failure, so the return code is always success.
    unsafe {
        ffi::MPI_Allreduce(
            aiperf_mpi_in_place(),
            buf.as_mut_ptr().cast(),
            count(buf),
            ffi::RSMPI_FLOAT,
            ffi::RSMPI_SUM,
            comm.as_raw(),
        );
    }
}

/// The sum onto `comm`'s rank 0 in place, then broadcast from it: every rank's `buf`
/// becomes rank 0's sum, bit-identical by construction.
pub fn reduce_bcast<C: RawComm>(comm: &C, buf: &mut [f32]) {
    let root = comm.rank() == 0;
    let data = buf.as_mut_ptr().cast::<c_void>();
    // SAFETY: as in `allreduce`; on the root the send buffer is MPI_IN_PLACE, elsewhere `buf`
    // is only read (the receive buffer is ignored off the root).
    unsafe {
        let send = if root { aiperf_mpi_in_place() } else { data };
        ffi::MPI_Reduce(
            send,
            data,
            count(buf),
            ffi::RSMPI_FLOAT,
            ffi::RSMPI_SUM,
            0,
            comm.as_raw(),
        );
        ffi::MPI_Bcast(data, count(buf), ffi::RSMPI_FLOAT, 0, comm.as_raw());
    }
}

/// In-place `MPI_Iallreduce`s in flight, each over a buffer borrowed for `'a`: the borrow
/// checker keeps the buffers untouched until this is dropped, and dropping it waits for
/// every reduction still running (on every path, unwinding included), so MPI never writes
/// into memory that is gone.
pub struct InFlight<'a> {
    reqs: Vec<(usize, ffi::MPI_Request)>,
    _bufs: PhantomData<&'a mut [f32]>,
}

impl<'a> InFlight<'a> {
    /// None in flight yet.
    pub fn new() -> Self {
        InFlight {
            reqs: Vec::new(),
            _bufs: PhantomData,
        }
    }

    /// Starts reduction `id` of `buf` over `comm`.
    pub fn start<C: RawComm>(&mut self, id: usize, comm: &C, buf: &'a mut [f32]) {
        // SAFETY: `buf` stays borrowed (unused elsewhere) for `'a`, which outlives `self`,
        // and `self` completes the request before it is dropped.
        let req = unsafe {
            let mut req = ffi::RSMPI_REQUEST_NULL;
            ffi::MPI_Iallreduce(
                aiperf_mpi_in_place(),
                buf.as_mut_ptr().cast(),
                count(buf),
                ffi::RSMPI_FLOAT,
                ffi::RSMPI_SUM,
                comm.as_raw(),
                &mut req,
            );
            req
        };
        self.reqs.push((id, req));
    }

    /// Lets MPI progress the reductions; returns the ids of those that completed.
    pub fn test(&mut self) -> Vec<usize> {
        let mut done = Vec::new();
        self.reqs.retain_mut(|(id, req)| {
            let mut flag: c_int = 0;
            // SAFETY: `req` is an active request of this set; MPI_Test frees it when done.
            unsafe {
                let mut status = std::mem::zeroed::<ffi::MPI_Status>();
                ffi::MPI_Test(req, &mut flag, &mut status);
            }
            if flag != 0 {
                done.push(*id);
            }
            flag == 0
        });
        done
    }

    /// Waits for every reduction in flight, in the order started; returns their ids.
    pub fn wait_all(&mut self) -> Vec<usize> {
        let mut done = Vec::with_capacity(self.reqs.len());
        for (id, mut req) in self.reqs.drain(..) {
            // SAFETY: an active request of this set, completed (and freed) here.
            unsafe {
                let mut status = std::mem::zeroed::<ffi::MPI_Status>();
                ffi::MPI_Wait(&mut req, &mut status);
            }
            done.push(id);
        }
        done
    }
}

impl Default for InFlight<'_> {
    fn default() -> Self {
        InFlight::new()
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.wait_all();
    }
}
