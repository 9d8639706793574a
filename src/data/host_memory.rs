//! Host tensors the loader and the exchange write into directly: allocated uninitialised
//! (page-locked for a GPU's copies) and seen as slices of their elements.

use tch::{Device, Kind, Tensor};

use super::DataError;

/// An uninitialised contiguous host tensor of `dims`, page-locked when `pinned`.
pub(crate) fn host_tensor(dims: [usize; 4], kind: Kind, pinned: bool) -> Result<Tensor, DataError> {
    let t = Tensor::f_empty(dims.map(|d| d as i64), (kind, Device::Cpu))?;
    // `_pin_memory`: `pin_memory(device)` would warn (twice) on every call that its device
    // argument is deprecated, and tch has no form without it.
    Ok(if pinned {
        t.f_internal_pin_memory(Device::Cuda(0))?
    } else {
        t
    })
}

/// The elements of a contiguous host tensor of element type `T`, writable.
///
/// # Safety
/// `t` must be a contiguous CPU tensor of `T`s that nothing else reads or writes while the
/// slice lives.
pub(crate) unsafe fn host_slice<T>(t: &mut Tensor) -> &mut [T] {
    let n = t.numel();
    if n == 0 {
        return &mut [];
    }
    std::slice::from_raw_parts_mut(t.data_ptr().cast::<T>(), n)
}
