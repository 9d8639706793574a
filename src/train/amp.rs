//! Mixed precision: the arithmetic of the training step (`--precision`) and autocast in the
//! reduced type it names — CUDA autocast on a GPU, CPU autocast (bfloat16 only) on a
//! processor. tch switches CUDA autocast on and off but always in float16; the type is
//! libtorch's own `at::autocast::set_autocast_dtype`, called through its C++ symbol
//! (exported by libtorch_cpu in 2.11 and 2.13: a libtorch without it fails to link, never
//! silently trains in another type). CPU autocast goes through `src/train/kernels.cpp`.

use serde::{Deserialize, Serialize};

/// Arithmetic of the training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Measured: the fastest training step of the precisions every training rank computes
    /// natively, timed at start-up and recorded as what it chose.
    Auto,
    /// float32 everywhere.
    Fp32,
    /// CUDA automatic mixed precision: float16 matrix products, float32 parameters, dynamic
    /// loss scaling (GPUs only).
    Fp16,
    /// Automatic mixed precision in bfloat16 (CUDA autocast on a GPU, CPU autocast on a
    /// processor with native bfloat16): float32's exponent range, so no loss scaling.
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
    // src/train/kernels.cpp.
    fn aiperf_cpu_autocast_enter(dtype: i8) -> i32;
    fn aiperf_cpu_autocast_exit(was: i32);
    fn aiperf_cpu_autocast_state(dtype: *mut i8) -> i32;
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

/// Whether CPU autocast is on for this thread, and its reduced type.
pub fn cpu_autocast_state() -> (bool, Result<tch::Kind, i8>) {
    let mut dtype = 0i8;
    // SAFETY: reads thread-local settings into a local.
    let on = unsafe { aiperf_cpu_autocast_state(&mut dtype) } == 1;
    let kind = match dtype {
        HALF => Ok(tch::Kind::Half),
        BFLOAT16 => Ok(tch::Kind::BFloat16),
        other => Err(other),
    };
    (on, kind)
}

impl Precision {
    /// The name recorded in the run's attributes.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Auto => "auto",
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        }
    }

    /// Whether the step runs under autocast (a reduced type).
    pub fn autocasts(self) -> bool {
        matches!(self, Precision::Fp16 | Precision::Bf16)
    }

    /// Runs `f` under autocast in this precision's reduced type on `device` (fp32: as it
    /// is): CUDA autocast on a GPU, CPU autocast on the processor (bf16 only; the trainer
    /// refuses fp16 there). The type is set on the calling thread each time (libtorch keeps
    /// it per thread).
    pub fn autocast<T>(self, device: tch::Device, f: impl FnOnce() -> T) -> T {
        let dtype = match self {
            Precision::Auto | Precision::Fp32 => return f(),
            Precision::Fp16 => HALF,
            Precision::Bf16 => BFLOAT16,
        };
        if device.is_cuda() {
            // SAFETY: sets a thread-local setting to a valid (device, scalar type) pair.
            unsafe { at_set_autocast_dtype(CUDA, dtype) };
            return tch::autocast(true, f);
        }
        // SAFETY: sets thread-local settings; the exit below restores them, also when `f`
        // panics (the guard's drop).
        let was = unsafe { aiperf_cpu_autocast_enter(dtype) };
        struct Exit(i32);
        impl Drop for Exit {
            fn drop(&mut self) {
                // SAFETY: pairs the enter above on the same thread.
                unsafe { aiperf_cpu_autocast_exit(self.0) }
            }
        }
        let _exit = Exit(was);
        f()
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
            let gpu = tch::Device::Cuda(0);
            let inside = Precision::Bf16.autocast(gpu, cuda_autocast_dtype);
            assert_eq!(inside, Ok(tch::Kind::BFloat16));
            assert_eq!(
                Precision::Fp16.autocast(gpu, cuda_autocast_dtype),
                Ok(tch::Kind::Half)
            );
            // fp32 leaves the type as it was.
            Precision::Bf16.autocast(gpu, || ());
            assert_eq!(
                Precision::Fp32.autocast(gpu, cuda_autocast_dtype),
                Ok(tch::Kind::BFloat16)
            );
        })
        .join()
        .unwrap();
        assert_eq!(Precision::Bf16.name(), "bf16");
        assert!(Precision::Bf16.autocasts() && !Precision::Fp32.autocasts());
        assert!(!Precision::Auto.autocasts());
    }

    #[test]
    fn cpu_autocast_is_on_in_bf16_inside_and_restored_after() {
        std::thread::spawn(|| {
            let cpu = tch::Device::Cpu;
            assert!(!cpu_autocast_state().0, "off by default");
            let (on, kind) = Precision::Bf16.autocast(cpu, cpu_autocast_state);
            assert_eq!((on, kind), (true, Ok(tch::Kind::BFloat16)));
            assert!(!cpu_autocast_state().0, "off again after");
            assert!(!Precision::Fp32.autocast(cpu, cpu_autocast_state).0);
            // A matrix product inside is computed in bfloat16, its inputs float32.
            let a = tch::Tensor::ones([4, 4], (tch::Kind::Float, cpu));
            let p = Precision::Bf16.autocast(cpu, || a.matmul(&a));
            assert_eq!(p.kind(), tch::Kind::BFloat16);
            assert_eq!(
                Precision::Fp32.autocast(cpu, || a.matmul(&a)).kind(),
                tch::Kind::Float
            );
            // Restored when the closure panics.
            let caught = std::panic::catch_unwind(|| {
                Precision::Bf16.autocast(cpu, || panic!("inside"));
            });
            assert!(caught.is_err());
            assert!(!cpu_autocast_state().0);
        })
        .join()
        .unwrap();
    }
}
