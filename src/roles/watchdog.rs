//! Stall detection: a group that sends nothing (no epoch, no request) for longer than
//! `--stall-timeout` is declared stalled. The clock starts when this process starts serving
//! — after `--resume` too, never at the run's original start.

/// Every group's last sign of life.
#[derive(Clone, Debug)]
pub struct Watchdog {
    timeout_s: f64,
    last_seen_s: Vec<f64>,
    done: Vec<bool>,
    stalled: Vec<bool>,
}

impl Watchdog {
    /// Watches `groups` groups from `start_s` (this session's start) on.
    pub fn new(groups: usize, start_s: f64, timeout_s: f64) -> Self {
        Watchdog {
            timeout_s,
            last_seen_s: vec![start_s; groups],
            done: vec![false; groups],
            stalled: vec![false; groups],
        }
    }

    /// Group `g` was heard from at `now` (a stalled group that speaks again is live again).
    pub fn seen(&mut self, g: usize, now: f64) {
        if let Some(t) = self.last_seen_s.get_mut(g) {
            *t = t.max(now);
            self.stalled[g] = false;
        }
    }

    /// Group `g` said goodbye: it is no longer watched.
    pub fn done(&mut self, g: usize) {
        if let Some(d) = self.done.get_mut(g) {
            *d = true;
        }
    }

    /// Groups newly stalled at `now`, with how long each was silent.
    pub fn check(&mut self, now: f64) -> Vec<(usize, f64)> {
        let mut out = Vec::new();
        for g in 0..self.last_seen_s.len() {
            let silent = now - self.last_seen_s[g];
            if !self.done[g] && !self.stalled[g] && silent > self.timeout_s {
                self.stalled[g] = true;
                out.push((g, silent));
            }
        }
        out
    }

    /// Groups stalled now.
    pub fn stalled(&self) -> Vec<usize> {
        (0..self.stalled.len())
            .filter(|&g| self.stalled[g])
            .collect()
    }

    /// Groups neither done nor stalled.
    pub fn live(&self) -> usize {
        (0..self.done.len())
            .filter(|&g| !self.done[g] && !self.stalled[g])
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_group_stalls_once_and_a_speaking_one_does_not() {
        let mut w = Watchdog::new(2, 100.0, 10.0);
        assert!(w.check(109.0).is_empty());
        w.seen(0, 105.0);
        assert_eq!(w.check(112.0), vec![(1, 12.0)]);
        assert!(w.check(113.0).is_empty(), "reported once");
        assert_eq!(w.stalled(), vec![1]);
        assert_eq!(w.live(), 1);
        w.seen(1, 114.0);
        assert!(w.stalled().is_empty(), "live again");
        w.done(0);
        assert!(
            w.check(200.0).iter().all(|&(g, _)| g == 1),
            "done groups are not watched"
        );
    }

    /// Regression: after `--resume` of a run older than the stall timeout, the groups must
    /// not be stalled at once — the watch starts at the resume, not the run's t0.
    #[test]
    fn regression_resume_older_than_stall_timeout_does_not_stall_every_group() {
        let t0 = 1000.0;
        let resumed_at = t0 + 3.0 * 7200.0;
        let mut w = Watchdog::new(3, resumed_at, 7200.0);
        assert!(w.check(resumed_at + 1.0).is_empty());
        assert_eq!(w.live(), 3);
        assert_eq!(w.check(resumed_at + 7201.0).len(), 3);
    }
}
