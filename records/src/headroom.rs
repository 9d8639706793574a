//! Room left for the records. A write that fails part-way (a full disk, a file-size limit)
//! can leave an HDF5 file's last structures half written: rows that read as fill, or a
//! global heap collection HDF5 cannot load again. So a writer checks, before every append,
//! that the file's filesystem and the process's file-size limit leave [`HEADROOM`] bytes,
//! and stops the run with an error naming the file while everything is still whole; the
//! run goes on with `aiperf run --resume` once there is room again.

use std::path::Path;

/// The room kept free: far more than one append and its flush write (a row, an
/// architecture's text, HDF5's metadata), so the files close whole after the stop.
pub const HEADROOM: u64 = 2 << 20;

/// Why `path` (an open record file) may not grow now, or `None` when it may.
pub fn short_of_room(path: &Path) -> Option<String> {
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    if let Some(limit) = file_size_limit() {
        if limit.saturating_sub(size) < HEADROOM {
            return Some(format!(
                "{size} bytes, near the file-size limit of {limit} bytes (ulimit -f): aiperf stops before a record could be cut off; raise the limit (ulimit -f unlimited), then continue the run with --resume"
            ));
        }
    }
    let free = free_bytes(path.parent().unwrap_or(Path::new(".")))?;
    (free < HEADROOM).then(|| {
        format!(
            "its filesystem has {free} bytes free, under the {HEADROOM} aiperf keeps so that every record is written whole: the run stops here; free some space, then continue the run with --resume"
        )
    })
}

/// The process's file-size limit in bytes (`RLIMIT_FSIZE`), `None` when unlimited.
fn file_size_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// Bytes an unprivileged writer may still use on `dir`'s filesystem (`None`: unknown).
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value for statvfs to overwrite.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path; statvfs writes one struct into `s`.
    let ok = unsafe { libc::statvfs(c.as_ptr(), &mut s) } == 0;
    ok.then(|| s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_near_the_size_limit_is_stopped_before_it_grows() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("primary.h5");
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        assert_eq!(short_of_room(&path), None, "a roomy filesystem, no limit");
        // In a child, so the limit binds nothing else: the file is within HEADROOM of it.
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg("ulimit -f 2048; exec \"$0\" --exact headroom::tests::print_room --nocapture")
            .arg(std::env::current_exe().unwrap())
            .env("AIPERF_ROOM_OF", &path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("near the file-size limit of 2097152 bytes (ulimit -f)"),
            "{text}"
        );
    }

    /// Prints `short_of_room` of `$AIPERF_ROOM_OF` (run by the test above, under a limit).
    #[test]
    fn print_room() {
        if let Some(p) = std::env::var_os("AIPERF_ROOM_OF") {
            println!("room: {:?}", short_of_room(Path::new(&p)));
        }
    }

    #[test]
    fn free_space_is_read_from_the_files_filesystem() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(free_bytes(tmp.path()).is_some_and(|b| b > 0));
        assert_eq!(free_bytes(&tmp.path().join("no/such")), None);
    }
}
