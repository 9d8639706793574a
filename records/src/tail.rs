//! Rows that were never written whole. A job that stops while it appends a row (a full
//! disk, a file-size limit, a kill) can leave a dataset's extent grown while the row's
//! values never reached the file: those read back as HDF5's fill value, zero. Such rows can
//! only sit at a dataset's end; a resume drops them before it appends, and a reader of a
//! run that did not stop cleanly leaves them out, so every chain follows only what is on
//! disk.

use crate::schema::{EpochRow, MonitorRow, StepRow, TpeRow, TraceRow, TrialRow};

/// A row that reads as fill was never written: no written row looks like one.
pub trait Unwritten {
    /// Whether this row holds HDF5's fill value where a written row never does.
    fn unwritten(&self) -> bool;
}

macro_rules! sealed_rows {
    ($($t:ty),*) => {$(
        /// Its digest is a SHA-256, never all zero once written.
        impl Unwritten for $t {
            fn unwritten(&self) -> bool {
                self.digest == [0; 32]
            }
        }
    )*};
}
sealed_rows!(TrialRow, TpeRow, EpochRow, StepRow);

/// Its time is a Unix time, never zero once written.
impl Unwritten for MonitorRow {
    fn unwritten(&self) -> bool {
        self.time_s == 0.0
    }
}

/// Its epoch counts from 1.
impl Unwritten for TraceRow {
    fn unwritten(&self) -> bool {
        self.epoch == 0
    }
}

/// Drops the rows at the end of `rows` that were never written; returns how many.
pub fn drop_unwritten<T: Unwritten>(rows: &mut Vec<T>) -> usize {
    let kept = rows.len() - rows.iter().rev().take_while(|r| r.unwritten()).count();
    let dropped = rows.len() - kept;
    rows.truncate(kept);
    dropped
}

/// The architectures' rows written whole: both the id and the text of each, the text not
/// empty (an unwritten variable-length string reads as empty).
pub fn architectures_written(ids: &[u64], json: &[String]) -> usize {
    ids.len()
        .min(json.len())
        .min(json.iter().position(String::is_empty).unwrap_or(json.len()))
}

/// The sentence a resume logs and a reader warns with for `dropped` rows of `dataset`.
pub fn note(file: &str, dataset: &str, dropped: usize) -> String {
    format!(
        "{file} {dataset}: {dropped} row(s) at its end never written whole (the job stopped while writing them: a full disk, a file-size limit or a kill) are left out"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn monitor(time_s: f64) -> MonitorRow {
        MonitorRow {
            time_s,
            accel_util: 0.5,
            accel_mem_bytes: 1.0,
            cpu_util: 0.5,
            host_mem_bytes: 1.0,
        }
    }

    #[test]
    fn only_fill_rows_at_the_end_are_dropped() {
        let mut rows = vec![
            monitor(5.0),
            monitor(0.0),
            monitor(6.0),
            monitor(0.0),
            monitor(0.0),
        ];
        assert_eq!(drop_unwritten(&mut rows), 2);
        // A fill row followed by a written one is not a stopped append: it stays (and the
        // reader's checks judge it).
        assert_eq!(rows.len(), 3);
        assert_eq!(drop_unwritten(&mut rows), 0);
    }

    #[test]
    fn an_architecture_needs_its_id_and_its_text() {
        let json = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            architectures_written(&[1, 2, 3], &json(&["a", "b", "c"])),
            3
        );
        assert_eq!(architectures_written(&[1, 2], &json(&["a", "b", "c"])), 2);
        assert_eq!(architectures_written(&[1, 2, 3], &json(&["a", "b", ""])), 2);
    }
}
