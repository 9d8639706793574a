//! Where the exchanged values sit while MPI sums them (`--exchange-staging`). On the host,
//! tensors' values are copied into a flat f32 buffer — page-locked (pinned) when the tensors
//! are on CUDA, so the copies are single DMA transfers — and back after the sum. On the
//! device, they are copied into one flat buffer on the tensors' own device whose memory goes
//! to MPI directly: with CUDA this needs a CUDA-aware MPI, which OpenMPI reports at run time
//! (`MPIX_Query_cuda_support`); on the CPU it is the same memory MPI always takes, which
//! is how the tests exercise this path on machines without a GPU.

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::calls::{cuda_aware, CudaAware};
use super::ExchangeError;
use crate::data::host_slice;

/// Where the exchange keeps its buffer.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Staging {
    /// `device` for CUDA tensors when the MPI is CUDA-aware, else `host` (on the CPU the
    /// gradients are views of the buckets all the same: MPI reads them where they lie).
    #[default]
    Auto,
    /// A host buffer (pinned for CUDA tensors) the values are copied through, gradients
    /// included (on the CPU too, where it exercises CUDA's path without a CUDA-aware MPI).
    Host,
    /// A buffer on the tensors' device, handed to MPI as it is.
    Device,
}

/// A resolved staging for tensors on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// Through host memory; `pinned` when the tensors are on CUDA.
    Host {
        /// Page-locked memory.
        pinned: bool,
    },
    /// In place on the tensors' device.
    Device(Device),
}

impl Staging {
    /// What `self` means for tensors on `device`; `Device` with CUDA tensors needs a
    /// CUDA-aware MPI (asked at run time, only for CUDA tensors).
    pub fn resolve(self, device: Device) -> Result<Resolved, ExchangeError> {
        let aware = if device.is_cuda() {
            cuda_aware()
        } else {
            CudaAware::Unknown
        };
        self.resolve_with(device, aware)
    }

    /// [`Staging::resolve`] given the MPI's answer.
    fn resolve_with(self, device: Device, aware: CudaAware) -> Result<Resolved, ExchangeError> {
        let cuda = device.is_cuda();
        Ok(match self {
            Staging::Host => Resolved::Host { pinned: cuda },
            Staging::Device if cuda && aware != CudaAware::Yes => {
                return Err(ExchangeError::Config(format!(
                    "--exchange-staging device: this MPI does not take CUDA memory (MPIX_Query_cuda_support: {aware:?}); use --exchange-staging host or auto, or set AIPERF_MPI_CUDA_AWARE=1 if the MPI is CUDA-aware but cannot say"
                )))
            }
            Staging::Device => Resolved::Device(device),
            Staging::Auto if cuda && aware == CudaAware::Yes => Resolved::Device(device),
            Staging::Auto => Resolved::Host { pinned: cuda },
        })
    }
}

impl Resolved {
    /// One line for the log.
    pub fn describe(self) -> &'static str {
        match self {
            Resolved::Host { pinned: false } => "host buffers",
            Resolved::Host { pinned: true } => "pinned host buffers (the MPI is not CUDA-aware)",
            Resolved::Device(d) if d.is_cuda() => "CUDA device buffers handed to a CUDA-aware MPI",
            Resolved::Device(_) => "one flat tensor handed to MPI in place",
        }
    }
}

/// The exchange's buffers, kept across steps (each grows to the largest exchange seen).
#[derive(Default)]
pub struct ExchangeBuffer {
    host: Vec<f32>,
    pinned: Option<Tensor>,
    flat: Option<Tensor>,
}

impl std::fmt::Debug for ExchangeBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeBuffer")
            .field("host", &self.host.len())
            .field("pinned", &self.pinned.as_ref().map(Tensor::numel))
            .field("flat", &self.flat.as_ref().map(Tensor::numel))
            .finish()
    }
}

/// A tensor of `len` f32s (at least `len`) on `device`, reused while large enough.
fn reuse(
    slot: &mut Option<Tensor>,
    len: usize,
    make: impl Fn(i64) -> Result<Tensor, ExchangeError>,
) -> Result<&mut Tensor, ExchangeError> {
    if slot.as_ref().is_none_or(|t| t.numel() < len) {
        *slot = None;
        *slot = Some(make(len.max(1) as i64)?);
    }
    Ok(slot.as_mut().expect("just filled"))
}

impl ExchangeBuffer {
    /// A zeroed host buffer of `len` f32s, page-locked when `pinned`.
    pub fn host(&mut self, len: usize, pinned: bool) -> Result<&mut [f32], ExchangeError> {
        if !pinned {
            let grown = len > self.host.capacity();
            self.host.clear();
            self.host.resize(len, 0.0);
            if grown {
                crate::host::advise_huge_pages(self.host.as_mut_ptr().cast(), len * 4);
            }
            return Ok(&mut self.host);
        }
        let t = reuse(&mut self.pinned, len, |n| {
            // `_pin_memory`: `pin_memory(device)` warns on every call (deprecated argument).
            Ok(Tensor::f_zeros([n], (Kind::Float, Device::Cpu))?
                .f_internal_pin_memory(Device::Cuda(0))?)
        })?;
        // SAFETY: a contiguous CPU float tensor of at least `len` elements that only this
        // buffer holds; the slice borrows `self`, so the tensor outlives it unchanged.
        let slice = &mut unsafe { host_slice::<f32>(t) }[..len];
        slice.fill(0.0);
        Ok(slice)
    }

    /// A flat f32 tensor of `len` elements (zeroed) on `device`.
    pub fn device(&mut self, len: usize, device: Device) -> Result<Tensor, ExchangeError> {
        if self.flat.as_ref().is_some_and(|t| t.device() != device) {
            self.flat = None;
        }
        let t = reuse(&mut self.flat, len, |n| {
            Ok(Tensor::f_zeros([n], (Kind::Float, device))?)
        })?;
        let mut view = t.f_narrow(0, 0, len as i64)?;
        let _ = view.f_zero_()?;
        Ok(view)
    }
}

/// A tensor of `len` f32s over host memory at `data` (no copy): the view libtorch copies
/// device values into or out of.
///
/// # Safety
/// `data` must stay valid for `len` f32s, and not be accessed otherwise, while the tensor
/// (and anything viewing it) is in use.
pub unsafe fn host_view(data: *mut f32, len: usize) -> Result<Tensor, ExchangeError> {
    Ok(Tensor::f_from_blob(
        data.cast::<u8>(),
        &[len as i64],
        &[1],
        Kind::Float,
        Device::Cpu,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_follows_the_device_and_the_mpi() {
        let cuda = Device::Cuda(0);
        for aware in [CudaAware::Yes, CudaAware::No, CudaAware::Unknown] {
            let on_cpu = |s: Staging| s.resolve_with(Device::Cpu, aware).unwrap();
            assert_eq!(on_cpu(Staging::Auto), Resolved::Host { pinned: false });
            assert_eq!(on_cpu(Staging::Host), Resolved::Host { pinned: false });
            assert_eq!(on_cpu(Staging::Device), Resolved::Device(Device::Cpu));
            assert_eq!(
                Staging::Host.resolve_with(cuda, aware).unwrap(),
                Resolved::Host { pinned: true }
            );
        }
        let auto = |aware| Staging::Auto.resolve_with(cuda, aware).unwrap();
        assert_eq!(auto(CudaAware::Yes), Resolved::Device(cuda));
        assert_eq!(auto(CudaAware::No), Resolved::Host { pinned: true });
        assert_eq!(auto(CudaAware::Unknown), Resolved::Host { pinned: true });
        let e = Staging::Device
            .resolve_with(cuda, CudaAware::No)
            .unwrap_err();
        assert!(e.to_string().contains("--exchange-staging host"), "{e}");
    }

    #[test]
    fn buffers_are_zeroed_and_reused() {
        let mut b = ExchangeBuffer::default();
        b.host(8, false).unwrap().fill(3.0);
        assert!(b.host(5, false).unwrap().iter().all(|&x| x == 0.0));
        let flat = b.device(6, Device::Cpu).unwrap();
        let _ = flat.shallow_clone().fill_(2.0);
        let again = b.device(4, Device::Cpu).unwrap();
        assert_eq!(again.numel(), 4);
        assert_eq!(again.sum(Kind::Float).double_value(&[]), 0.0);
        // The same storage: a smaller exchange allocates nothing.
        assert_eq!(again.data_ptr(), flat.data_ptr());
    }
}
