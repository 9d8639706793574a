//! Rank 0's status line for batch logs (elapsed, trials, epochs, OPS, best accuracy) every
//! `--status-interval` seconds, and the process's CPU time.

/// Running totals for the status line.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    /// Epochs completed.
    pub epochs: u64,
    /// Their operations.
    pub ops: u128,
    /// Best validation accuracy.
    pub best: f64,
}

/// Trials finished (over the whole run) and running (registered in this session and not
/// finished).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Trials {
    /// Trials finished.
    pub finished: usize,
    /// Trials running.
    pub running: usize,
}

/// When the next line is due.
#[derive(Clone, Debug)]
pub struct StatusLine {
    next_s: f64,
    interval_s: f64,
}

impl StatusLine {
    /// Lines every `interval_s` seconds from `start_s` on.
    pub fn new(start_s: f64, interval_s: f64) -> Self {
        StatusLine {
            next_s: start_s + interval_s,
            interval_s,
        }
    }

    /// The line to print at `now`, if one is due; `t0` is the run's start (the OPS are over
    /// the whole run, down time of a resumed run included).
    pub fn due(&mut self, now: f64, t0: f64, totals: Totals, trials: Trials) -> Option<String> {
        if now < self.next_s {
            return None;
        }
        // Skip the lines missed (a slow request); never loops more than the missed count.
        let missed = ((now - self.next_s) / self.interval_s).floor() + 1.0;
        self.next_s += missed * self.interval_s;
        Some(line(now - t0, totals, trials))
    }
}

/// One status line.
pub fn line(elapsed_s: f64, t: Totals, trials: Trials) -> String {
    let Trials { finished, running } = trials;
    let e = elapsed_s.max(0.0) as u64;
    format!(
        "status: {:02}:{:02}:{:02} elapsed, {finished} trials finished ({running} running), {} epochs, {:.4e} OPS, best accuracy {:.4}",
        e / 3600,
        e / 60 % 60,
        e % 60,
        t.epochs,
        t.ops as f64 / elapsed_s.max(1e-9),
        t.best
    )
}

/// CPU seconds this process has used (user + system, from /proc/self/stat; 0 where absent).
pub fn process_cpu_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) — utime and stime are the 12th
    // and 13th of them, in clock ticks (USER_HZ, 100 on Linux).
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_every_interval_and_after_a_resume_show_the_recorded_totals() {
        let mut s = StatusLine::new(1000.0, 60.0);
        let t = Totals {
            epochs: 12,
            ops: 6_000_000_000,
            best: 0.875,
        };
        let trials = Trials {
            finished: 3,
            running: 1,
        };
        assert!(s.due(1059.0, 0.0, t, trials).is_none());
        let l = s.due(1060.0, 0.0, t, trials).unwrap();
        assert!(
            l.contains("00:17:40 elapsed") && l.contains("3 trials finished (1 running)"),
            "{l}"
        );
        assert!(l.contains("12 epochs") && l.contains("0.8750"), "{l}");
        // A long gap: one line, then the next on the grid.
        assert!(s.due(1500.0, 0.0, t, trials).is_some());
        assert!(s.due(1510.0, 0.0, t, trials).is_none());
        assert!(s.due(1540.0, 0.0, t, trials).is_some());
    }
}
