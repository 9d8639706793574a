//! Mixed precision: the arithmetic of the training step (`--precision`) and CUDA autocast in
//! the reduced type it names. tch switches autocast on and off but always in float16; the
//! type is libtorch's own `at::autocast::set_autocast_dtype`, called through its C++ symbol
//! (exported by libtorch_cpu in 2.11 and 2.13: a libtorch without it fails to link, never
//! silently trains in another type).

use serde::{Deserialize, Serialize};

/// Arithmetic of the training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// float32 everywhere (the only choice on CPU).
    Fp32,
    /// CUDA automatic mixed precision: float16 matrix products, float32 parameters, dynamic
    /// loss scaling.
    Fp16,
    /// CUDA automatic mixed precision in bfloat16: float32's exponent range, so no loss
    /// scaling.
    Bf16,
}

extern "C" {
    // void at::autocast::set_autocast_dtype(c10::DeviceType, c10::ScalarType); both enums
    // are int8_t-based, passed as integers.
    #[link_name = "_ZN2at8autocast18set_autocast_dtypeEN3c1010DeviceTypeENS1_10ScalarTypeE"]
    fn at_set_autocast_dtype(device: i8, dtype: i8);
    // c10::ScalarType at::autocast::get_autocast_dtype(c10::DeviceType).
    #[link_name = "_ZN2at8autocast18get_autocast_dtypeEN3c1010DeviceTypeE"]
    fn at_get_autocast_dtype(device: i8) -> i8;
}

/// `c10::DeviceType::CUDA`.
const CUDA: i8 = 1;
/// `c10::ScalarType::Half` and `BFloat16` (c10/core/ScalarType.h).
const HALF: i8 = 5;
const BFLOAT16: i8 = 15;

/// The reduced type CUDA autocast uses on this thread: `Half` or `BFloat16` (else the raw
/// value).
pub fn cuda_autocast_dtype() -> Result<tch::Kind, i8> {
    // SAFETY: reads a thread-local setting; no preconditions.
    match unsafe { at_get_autocast_dtype(CUDA) } {
        HALF => Ok(tch::Kind::Half),
        BFLOAT16 => Ok(tch::Kind::BFloat16),
        other => Err(other),
    }
}

impl Precision {
    /// The name recorded in the run's attributes.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        }
    }

    /// Whether the step runs under CUDA autocast (which needs a CUDA device).
    pub fn autocasts(self) -> bool {
        self != Precision::Fp32
    }

    /// Runs `f` under CUDA autocast in this precision's reduced type (fp32: as it is). The
    /// type is set on the calling thread each time (libtorch keeps it per thread).
    pub fn autocast<T>(self, f: impl FnOnce() -> T) -> T {
        let dtype = match self {
            Precision::Fp32 => return f(),
            Precision::Fp16 => HALF,
            Precision::Bf16 => BFLOAT16,
        };
        // SAFETY: sets a thread-local setting to a valid (device, scalar type) pair.
        unsafe { at_set_autocast_dtype(CUDA, dtype) };
        tch::autocast(true, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_autocast_type_follows_the_precision() {
        // Runs on the CPU libtorch too: the setting is kept without a device.
        std::thread::spawn(|| {
            assert_eq!(
                cuda_autocast_dtype(),
                Ok(tch::Kind::Half),
                "libtorch's default"
            );
            let inside = Precision::Bf16.autocast(cuda_autocast_dtype);
            assert_eq!(inside, Ok(tch::Kind::BFloat16));
            assert_eq!(
                Precision::Fp16.autocast(cuda_autocast_dtype),
                Ok(tch::Kind::Half)
            );
            // fp32 leaves the type as it was.
            Precision::Bf16.autocast(|| ());
            assert_eq!(
                Precision::Fp32.autocast(cuda_autocast_dtype),
                Ok(tch::Kind::BFloat16)
            );
        })
        .join()
        .unwrap();
        assert_eq!(Precision::Bf16.name(), "bf16");
        assert!(Precision::Bf16.autocasts() && !Precision::Fp32.autocasts());
    }
}
