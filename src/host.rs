//! Low-level helpers over the host this process runs on: the allocator's thresholds,
//! transparent huge pages, writable folders, the files mapped into the process and the
//! device labels the reports write. No MPI, no report: what the doctor, the exchange and
//! the loader build on.

/// What [`keep_freed_memory`] sets both glibc thresholds to: 1 GiB.
pub const MALLOC_KEEP_BYTES: i32 = 1 << 30;

/// A write past the file-size limit (`ulimit -f`) fails with `EFBIG`, naming its file in
/// aiperf's error, instead of killing the process by `SIGXFSZ` without a word: the
/// signal is ignored (at the start of `main`).
pub fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Keeps large freed blocks in the process for reuse instead of handing them back to the
/// kernel. By default glibc maps every allocation over 32 MiB afresh — each page faulted in
/// and zeroed by the kernel on first touch — and unmaps it when freed: for the loader's
/// batches (64 × 3 × 224 × 224 floats are 38 MiB) and libtorch's large activations that
/// is paid on every step, about half the loader's time at ImageNet size (docs/performance.md,
/// `make bench-data`). Sets `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD` to [`MALLOC_KEEP_BYTES`]
/// unless the user chose them (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`); the
/// process keeps up to that much freed memory mapped. Returns whether both were set.
pub fn keep_freed_memory() -> bool {
    #[cfg(target_env = "gnu")]
    {
        let chosen = |name: &str| std::env::var_os(name).is_some();
        if chosen("MALLOC_MMAP_THRESHOLD_") || chosen("MALLOC_TRIM_THRESHOLD_") {
            return false;
        }
        // SAFETY: mallopt only adjusts the allocator's thresholds; called before other
        // threads allocate (at the start of main).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_KEEP_BYTES) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_KEEP_BYTES) == 1
        }
    }
    #[cfg(not(target_env = "gnu"))]
    false
}

/// Advises the kernel to back the 2 MiB-aligned interior of `len` bytes at `data` with
/// transparent huge pages (`madvise(MADV_HUGEPAGE)`): fewer TLB misses when MPI and the
/// optimizer stream through large buffers. A hint: where the kernel does not allow it
/// (THP off, not anonymous memory), nothing changes. Returns whether the kernel took it.
pub fn advise_huge_pages(data: *mut u8, len: usize) -> bool {
    const HUGE: usize = 2 << 20;
    let start = (data as usize).next_multiple_of(HUGE);
    let end = (data as usize + len) / HUGE * HUGE;
    if end <= start {
        return false;
    }
    // SAFETY: the range lies inside the caller's allocation; MADV_HUGEPAGE changes how it
    // is backed, never its contents.
    unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) == 0 }
}

pub use aiperf_records::folder::writable;

/// The path of the first file mapped into this process (/proc/self/maps) whose path
/// `matches`: how a library loaded from wherever the dynamic loader found it is located.
pub fn mapped_file(matches: impl Fn(&str) -> bool) -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| matches(p))
        .map(std::path::PathBuf::from)
}

/// The folder of the `libtorch_cpu.so` mapped into this process, resolved through links.
pub fn loaded_libtorch() -> Option<String> {
    let path = mapped_file(|p| p.ends_with("/libtorch_cpu.so"))?;
    let dir = path.parent()?;
    Some(
        std::fs::canonicalize(dir)
            .unwrap_or_else(|_| dir.to_path_buf())
            .display()
            .to_string(),
    )
}

/// A device as the reports write it: `cpu` or `cuda:N`.
pub fn device_label(d: tch::Device) -> String {
    match d {
        tch::Device::Cuda(i) => format!("cuda:{i}"),
        _ => "cpu".into(),
    }
}

/// This machine's Unix time, seconds (a rank's own clock: the common clock subtracts its
/// offset, `crate::world::clock`).
pub fn unix_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The processors online on this node (`sysconf(_SC_NPROCESSORS_ONLN)`), `None` if unknown.
pub fn online_cpus() -> Option<usize> {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// The processors this process may run on (its affinity mask, as a launcher's binding
/// sets it), `None` if unknown.
pub fn bound_cpus() -> Option<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills at most
    // its size for this process (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        usize::try_from(libc::CPU_COUNT(&set))
            .ok()
            .filter(|&n| n > 0)
    }
}
