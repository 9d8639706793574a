//! Autograd hooks on the parameters' gradient accumulators (the C++ shim
//! `grad_hooks.cpp`, built by build.rs against libtorch's headers): while
//! [`GradHooks::during`] runs a backward pass, each parameter's hook reports its index the
//! moment autograd has accumulated its gradient — what the exchange's overlap needs to start
//! a bucket's reduction during backward ([`super::Progress::During`]).

use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

use tch::Tensor;

use super::ExchangeError;

type ReadyFn = unsafe extern "C" fn(ctx: *mut c_void, index: i64);

extern "C" {
    fn aiperf_grad_hooks_add(
        tensors: *const *mut c_void,
        n: i64,
        f: ReadyFn,
        ctx: *mut c_void,
        error: *mut *mut c_char,
    ) -> *mut c_void;
    fn aiperf_grad_hooks_remove(hooks: *mut c_void);
}

/// The callback of the backward pass in progress, if any.
struct Current(Option<*mut (dyn FnMut(usize) + 'static)>);
// SAFETY: the pointer is set only while `GradHooks::during` runs and the backward pass it
// wraps calls the hooks (on this thread, or on libtorch's device threads while this one
// waits): one caller at a time, behind the mutex.
unsafe impl Send for Current {}

/// Hooks on every parameter of a trial; removed when dropped.
pub(super) struct GradHooks {
    handle: *mut c_void,
    current: Box<Mutex<Current>>,
}

unsafe extern "C" fn on_ready(ctx: *mut c_void, index: i64) {
    // SAFETY: `ctx` is the `Mutex<Current>` boxed in a live `GradHooks` (its hooks are
    // removed before the box is freed).
    let current = unsafe { &*(ctx as *const Mutex<Current>) };
    if let Ok(guard) = current.lock() {
        if let Some(f) = guard.0 {
            // SAFETY: set by `during` for exactly the time its callback lives.
            unsafe { (*f)(index as usize) };
        }
    }
}

impl GradHooks {
    /// Hooks on `params` (leaves that require grad); `during`'s callback gets their index
    /// in this slice.
    pub fn add(params: &[Tensor]) -> Result<GradHooks, ExchangeError> {
        let current = Box::new(Mutex::new(Current(None)));
        let ptrs: Vec<*mut c_void> = params.iter().map(|t| t.as_ptr() as *mut c_void).collect();
        let mut error: *mut c_char = std::ptr::null_mut();
        // SAFETY: `ptrs` are live tch tensors for the call; `current` outlives the hooks
        // (they are removed in `drop` before it is freed).
        let handle = unsafe {
            aiperf_grad_hooks_add(
                ptrs.as_ptr(),
                ptrs.len() as i64,
                on_ready,
                (&*current as *const Mutex<Current>).cast_mut().cast(),
                &mut error,
            )
        };
        if handle.is_null() {
            let message = if error.is_null() {
                "unknown".to_string()
            } else {
                // SAFETY: a NUL-terminated string the shim allocated with strdup.
                let m = unsafe { CStr::from_ptr(error) }
                    .to_string_lossy()
                    .into_owned();
                unsafe { libc::free(error.cast()) };
                m
            };
            return Err(ExchangeError::Config(format!("autograd hooks: {message}")));
        }
        Ok(GradHooks { handle, current })
    }

    /// Runs `backward` with `ready(i)` called as parameter i's gradient completes.
    pub fn during<R>(&self, ready: &mut dyn FnMut(usize), backward: impl FnOnce() -> R) -> R {
        // SAFETY: the lifetime is erased only for the time `backward` runs; the pointer is
        // cleared (also on unwinding, by the guard) before `ready` can go out of scope.
        let erased: *mut (dyn FnMut(usize) + 'static) = unsafe { std::mem::transmute(ready) };
        struct Clear<'a>(&'a Mutex<Current>);
        impl Drop for Clear<'_> {
            fn drop(&mut self) {
                if let Ok(mut g) = self.0.lock() {
                    g.0 = None;
                }
            }
        }
        if let Ok(mut g) = self.current.lock() {
            g.0 = Some(erased);
        }
        let _clear = Clear(&self.current);
        backward()
    }

    /// Calls `overlap` with a step's backward pass ([`super::Backward`]) that runs
    /// `backward` under these hooks; returns what `overlap` returned, or backward's error.
    pub fn overlap<T, E>(
        &self,
        backward: impl FnOnce() -> Result<(), E>,
        overlap: impl FnOnce(&mut super::Backward<'_>) -> T,
    ) -> Result<T, E> {
        let mut outcome = Ok(());
        let mut backward = Some(backward);
        let mut run = |ready: &mut dyn FnMut(usize)| {
            if let Some(b) = backward.take() {
                outcome = self.during(ready, b);
            }
        };
        let result = overlap(&mut run);
        outcome.map(|()| result)
    }
}

impl Drop for GradHooks {
    fn drop(&mut self) {
        // SAFETY: the handle came from `aiperf_grad_hooks_add` and is removed once.
        unsafe { aiperf_grad_hooks_remove(self.handle) };
    }
}
