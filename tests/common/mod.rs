//! Helpers shared by the MPI integration tests.

use std::path::Path;

/// World ranks of `aiperf run` writing to `dir` (their command lines name it).
pub fn rank_pids(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<String> = cmd
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let is_rank = args.first()?.ends_with("/aiperf") && args.iter().any(|a| a == &needle);
            is_rank.then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}
