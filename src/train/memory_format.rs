//! The memory format of the training step (`--memory-format`, docs/design.md §7): the
//! default NCHW order or channels-last (NHWC in memory, the order oneDNN's and cuDNN's fast
//! convolutions read), for the model's four-dimensional parameters and every batch. `auto`
//! is decided once per run by a start-up probe ([`super::probe`]) and recorded as what it
//! chose. The values a layout holds are the same; the kernels that compute with them
//! differ, so a run is audited exactly only in its recorded format.

use std::ffi::{c_char, c_void, CStr};

use serde::{Deserialize, Serialize};
use tch::{nn, Tensor};

use super::TrainError;

extern "C" {
    // src/train/kernels.cpp.
    fn aiperf_channels_last(t: *mut c_void, out: *mut *mut c_void, error: *mut *mut c_char) -> i32;
    fn aiperf_is_channels_last(t: *mut c_void) -> i32;
}

/// The memory format of parameters and batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryFormat {
    /// Whichever a start-up probe of the run's first architecture measures faster.
    Auto,
    /// The default, contiguous N·C·H·W order (records that name no format trained so).
    #[default]
    Nchw,
    /// Channels-last: N·H·W·C in memory.
    ChannelsLast,
}

impl MemoryFormat {
    /// The name recorded in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            MemoryFormat::Auto => "auto",
            MemoryFormat::Nchw => "nchw",
            MemoryFormat::ChannelsLast => "channels-last",
        }
    }

    /// `t` in this format: a four-dimensional tensor in channels-last order (no copy when it
    /// already is one), anything else as it is.
    pub fn apply(self, t: &Tensor) -> Result<Tensor, TrainError> {
        if self != MemoryFormat::ChannelsLast || t.dim() != 4 {
            return Ok(t.shallow_clone());
        }
        channels_last(t)
    }

    /// Puts every four-dimensional variable of `vs` (convolution weights) in this format, in
    /// place (their values and autograd identity kept; momentum buffers created later follow
    /// them).
    pub fn apply_to(self, vs: &nn::VarStore) -> Result<(), TrainError> {
        if self != MemoryFormat::ChannelsLast {
            return Ok(());
        }
        tch::no_grad(|| -> Result<(), TrainError> {
            for (_, mut v) in vs.variables() {
                if v.dim() == 4 {
                    let cl = channels_last(&v)?;
                    v.f_set_data(&cl)?;
                }
            }
            Ok(())
        })
    }
}

/// `t` (four-dimensional) in channels-last order.
pub fn channels_last(t: &Tensor) -> Result<Tensor, TrainError> {
    let mut out: *mut c_void = std::ptr::null_mut();
    let mut error: *mut c_char = std::ptr::null_mut();
    // SAFETY: `t` is a live tch tensor (an at::Tensor *); the shim either stores a new
    // at::Tensor * in `out`, which `Tensor::from_ptr` then owns, or a malloc'd message.
    unsafe {
        if aiperf_channels_last(t.as_ptr() as *mut c_void, &mut out, &mut error) == 1 {
            return Ok(Tensor::from_ptr(out.cast()));
        }
        let msg = CStr::from_ptr(error).to_string_lossy().into_owned();
        libc::free(error.cast());
        Err(TrainError::Config(format!("channels-last: {msg}")))
    }
}

/// Whether `t` is four-dimensional and dense in channels-last order.
pub fn is_channels_last(t: &Tensor) -> bool {
    // SAFETY: `t` is a live tch tensor; the shim only reads its sizes and strides.
    unsafe { aiperf_is_channels_last(t.as_ptr() as *mut c_void) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn channels_last_keeps_values_and_changes_strides() {
        let t = Tensor::arange(2 * 3 * 4 * 5, (Kind::Float, Device::Cpu)).view([2, 3, 4, 5]);
        assert!(!is_channels_last(&t));
        let cl = MemoryFormat::ChannelsLast.apply(&t).unwrap();
        assert!(is_channels_last(&cl));
        assert_eq!(cl.stride(), [60, 1, 15, 3]);
        assert!(cl.equal(&t));
        // Already channels-last: the same memory, no copy.
        let again = MemoryFormat::ChannelsLast.apply(&cl).unwrap();
        assert_eq!(again.data_ptr(), cl.data_ptr());
        // NCHW and other ranks: untouched.
        let same = MemoryFormat::Nchw.apply(&t).unwrap();
        assert_eq!(same.data_ptr(), t.data_ptr());
        let v = Tensor::ones([3], (Kind::Float, Device::Cpu));
        assert_eq!(MemoryFormat::ChannelsLast.apply(&v).unwrap().stride(), [1]);
    }

    #[test]
    fn parameters_move_in_place_with_their_values() {
        let vs = nn::VarStore::new(Device::Cpu);
        let conv = nn::conv2d(vs.root() / "c", 3, 8, 3, Default::default());
        let before = conv.ws.copy();
        MemoryFormat::ChannelsLast.apply_to(&vs).unwrap();
        assert!(
            is_channels_last(&conv.ws),
            "the module's own handle sees it"
        );
        assert!(conv.ws.equal(&before) && conv.ws.requires_grad());
        assert_eq!(conv.bs.as_ref().unwrap().dim(), 1);
        let x = Tensor::ones([2, 3, 6, 6], (Kind::Float, Device::Cpu));
        let y = x.apply(&conv).sum(Kind::Float);
        y.backward();
        assert!(conv.ws.grad().defined());
    }
}
