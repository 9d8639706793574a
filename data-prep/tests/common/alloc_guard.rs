//! A global allocator for test binaries that records the largest single allocation and
//! refuses absurd ones. A binary opts in with
//! `#[global_allocator] static GUARD: common::alloc_guard::AllocGuard = common::alloc_guard::AllocGuard;`
//! A refused request makes the process abort ("memory allocation of N bytes failed"), so a
//! runaway allocation fails the test run instead of swapping the machine or being caught.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Requests above this are refused outright.
pub const REFUSE_ABOVE_BYTES: usize = 1 << 30;
/// The largest single allocation the guarded tests may make.
pub const HUGE_BYTES: usize = 64 << 20;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// [`System`], recording the largest request and refusing those above [`REFUSE_ABOVE_BYTES`].
pub struct AllocGuard;

fn admit(size: usize) -> bool {
    LARGEST.fetch_max(size, Ordering::Relaxed);
    size <= REFUSE_ABOVE_BYTES
}

// SAFETY: every call is forwarded unchanged to the system allocator, or answered with null
// (allowed by the GlobalAlloc contract) without touching memory.
unsafe impl GlobalAlloc for AllocGuard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if admit(layout.size()) {
            System.alloc(layout)
        } else {
            std::ptr::null_mut()
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if admit(layout.size()) {
            System.alloc_zeroed(layout)
        } else {
            std::ptr::null_mut()
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if admit(new_size) {
            System.realloc(ptr, layout, new_size)
        } else {
            std::ptr::null_mut()
        }
    }
}

/// The largest single allocation requested so far in this process.
pub fn largest_allocation() -> usize {
    LARGEST.load(Ordering::Relaxed)
}

/// Fails if any allocation so far exceeded [`HUGE_BYTES`].
pub fn assert_no_huge_allocation(what: &str) {
    let largest = largest_allocation();
    assert!(
        largest > 0,
        "{what}: AllocGuard is not this binary's global allocator"
    );
    assert!(
        largest <= HUGE_BYTES,
        "{what}: an allocation of {largest} bytes (the limit is {HUGE_BYTES})"
    );
}
