//! What `--version` prints: the program version, the commit it was built from and the
//! libraries the records depend on.

/// The commit the workspace was built from (12 hex digits), with `+modified` when the sources
/// differed from it, or `unknown` outside a git checkout.
pub const COMMIT: &str = env!("AIPERF_COMMIT");

/// What the binaries are built from (paths in the workspace, space-separated): an
/// uncommitted change to one of them marks [`COMMIT`] `+modified`.
pub const BUILD_INPUTS: &str = env!("AIPERF_BUILD_INPUTS");

/// The workspace's version (all crates share it).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The one-line version: `0.1.0 (commit 0937888a1b2c)`.
pub fn short() -> String {
    format!("{VERSION} (commit {COMMIT})")
}

/// The HDF5 library in use, `major.minor.patch`.
pub fn hdf5() -> String {
    let (a, b, c) = hdf5::library_version();
    format!("{a}.{b}.{c}")
}

/// `aiperf-score --version`: the version, the commit and HDF5 (the scorer needs nothing else).
pub fn score_long() -> String {
    format!("{VERSION}\ncommit {COMMIT}\nHDF5 {}", hdf5())
}
