//! What the primary's serve loop spent on each kind of request — how many, the serving
//! thread's CPU time handling each (the state machine, its records, encoding the reply: what
//! `make bench-primary` times), the wall time including the send — the CPU time decoding
//! the requests, and the bytes of the Result replies: the "primary:" lines that end every
//! run.

use crate::world::protocol::{ToGroup, ToPrimary};

/// The kinds of request a group's leader sends, in the order the lines print them; a
/// duplicate is a Register the primary answered with a Duplicate (another group registered
/// the architecture first), which carries the view's changes as a Result's reply does.
pub const KINDS: [&str; 7] = [
    "hello",
    "register",
    "duplicate",
    "suggest",
    "progress",
    "result",
    "bye",
];
/// The index of Result requests in [`KINDS`].
const RESULT: usize = 5;
/// The kinds a trial is made of (a bench trial's requests, and duplicates).
const TRIAL: std::ops::Range<usize> = 1..6;

/// The index of `msg`'s kind in [`KINDS`] (a Register: see [`answered_as`]).
pub fn kind_of(msg: &ToPrimary) -> usize {
    match msg {
        ToPrimary::Hello { .. } => 0,
        ToPrimary::Register { .. } => 1,
        ToPrimary::Suggest { .. } => 3,
        ToPrimary::Progress { .. } => 4,
        ToPrimary::Result { .. } => RESULT,
        ToPrimary::Bye { .. } => 6,
    }
}

/// A request of `kind` as the primary's `reply` makes it: a Register answered with a
/// Duplicate is a duplicate.
pub fn answered_as(kind: usize, reply: Option<&ToGroup>) -> usize {
    match reply {
        Some(ToGroup::Duplicate { .. }) if kind == 1 => 2,
        _ => kind,
    }
}

/// The CPU seconds the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): unlike wall
/// time, not inflated when other processes preempt the primary on a shared core.
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux defines.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Per-kind totals of the requests served.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Served {
    count: [u64; 7],
    wall_s: [f64; 7],
    cpu_s: [f64; 7],
    decode_cpu_s: f64,
    result_reply_bytes: u64,
    largest_result_reply: u64,
}

/// What serving one request took.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spent {
    /// Wall seconds from the request's arrival to its reply sent.
    pub wall_s: f64,
    /// The serving thread's CPU seconds decoding it.
    pub decode_cpu_s: f64,
    /// The serving thread's CPU seconds handling it up to the encoded reply.
    pub cpu_s: f64,
    /// The encoded reply's bytes (0: none was sent).
    pub reply_bytes: usize,
}

impl Served {
    /// Adds one request of `kind`.
    pub fn add(&mut self, kind: usize, spent: Spent) {
        self.count[kind] += 1;
        self.wall_s[kind] += spent.wall_s;
        self.cpu_s[kind] += spent.cpu_s;
        self.decode_cpu_s += spent.decode_cpu_s;
        if kind == RESULT {
            let bytes = spent.reply_bytes as u64;
            self.result_reply_bytes += bytes;
            self.largest_result_reply = self.largest_result_reply.max(bytes);
        }
    }

    /// Requests served, of every kind.
    pub fn requests(&self) -> u64 {
        self.count.iter().sum()
    }

    /// Wall seconds spent serving, all kinds.
    pub fn busy_s(&self) -> f64 {
        self.wall_s.iter().sum()
    }

    /// The serving thread's CPU microseconds per request of `kind` (0 when none came).
    pub fn cpu_us(&self, kind: usize) -> f64 {
        1e6 * self.cpu_s[kind] / self.count[kind].max(1) as f64
    }

    /// The serving thread's CPU seconds handling a trial: its Register (and duplicates),
    /// Suggest, Progress and Result requests over the Results.
    pub fn trial_cpu_s(&self) -> f64 {
        self.cpu_s[TRIAL].iter().sum::<f64>() / self.count[RESULT].max(1) as f64
    }

    /// The line on the requests from `groups` groups served over `wall_s`, with the
    /// process's `process_cpu_s` over that time.
    pub fn served_line(&self, groups: usize, wall_s: f64, process_cpu_s: f64) -> String {
        let wall = wall_s.max(1e-9);
        format!(
            "primary: served {} requests from {groups} groups in {wall:.1} s ({:.1}/s), busy {:.2}% of the time, {process_cpu_s:.2} CPU s",
            self.requests(),
            self.requests() as f64 / wall,
            100.0 * self.busy_s() / wall,
        )
    }

    /// The line on what serving cost, per kind and per trial, with the history it reached.
    pub fn cost_line(&self, history: usize) -> String {
        let kinds: Vec<String> = TRIAL
            .map(|k| format!("{} {:.1} us", KINDS[k], self.cpu_us(k)))
            .collect();
        let counts: Vec<String> = (0..KINDS.len())
            .map(|k| format!("{} {}", self.count[k], KINDS[k]))
            .collect();
        format!(
            "primary: CPU per request {}; per trial {:.3} ms; decoding {:.1} us per request; Result replies {:.0} bytes on average, largest {}; {}; history {history} models",
            kinds.join(", "),
            1e3 * self.trial_cpu_s(),
            1e6 * self.decode_cpu_s / self.requests().max(1) as f64,
            self.result_reply_bytes as f64 / self.count[RESULT].max(1) as f64,
            self.largest_result_reply,
            counts.join(", "),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(cpu_s: f64, reply_bytes: usize) -> Spent {
        Spent {
            wall_s: 2.0 * cpu_s,
            decode_cpu_s: 1e-5,
            cpu_s,
            reply_bytes,
        }
    }

    #[test]
    fn totals_per_kind_and_per_trial() {
        let mut s = Served::default();
        for (kind, cpu, bytes) in [
            (1, 0.001, 16),
            (2, 0.002, 50_000),
            (3, 0.003, 100),
            (4, 0.001, 8),
            (4, 0.001, 8),
            (5, 0.005, 3000),
            (5, 0.007, 1000),
            (6, 0.0, 0),
        ] {
            s.add(kind, spent(cpu, bytes));
        }
        assert_eq!(s.requests(), 8);
        assert!((s.busy_s() - 0.040).abs() < 1e-12);
        assert!((s.cpu_us(RESULT) - 6000.0).abs() < 1e-6);
        assert_eq!(s.cpu_us(0), 0.0);
        // (1 + 2 + 3 + 1 + 1 + 5 + 7) ms over 2 Results; a duplicate's reply is not a
        // Result's, and Bye's time is not a trial's.
        assert!((s.trial_cpu_s() - 0.010).abs() < 1e-12);
        assert_eq!(
            s.served_line(3, 4.0, 0.5),
            "primary: served 8 requests from 3 groups in 4.0 s (2.0/s), busy 1.00% of the time, 0.50 CPU s"
        );
        let line = s.cost_line(42);
        assert!(
            line.contains("register 1000.0 us, duplicate 2000.0 us"),
            "{line}"
        );
        assert!(
            line.contains("result 6000.0 us; per trial 10.000 ms"),
            "{line}"
        );
        assert!(line.contains("decoding 10.0 us per request"), "{line}");
        assert!(
            line.contains("Result replies 2000 bytes on average, largest 3000"),
            "{line}"
        );
        assert!(line
            .contains("0 hello, 1 register, 1 duplicate, 1 suggest, 2 progress, 2 result, 1 bye"));
        assert!(line.ends_with("history 42 models"), "{line}");
    }

    #[test]
    fn a_register_answered_duplicate_is_a_duplicate() {
        let register = ToPrimary::Register {
            group: 0,
            father: None,
            graph: crate::arch::resnet50(crate::arch::Shape::new(3, 32, 32), 10),
        };
        let dup = ToGroup::Duplicate {
            history: Default::default(),
        };
        let ok = ToGroup::Registered { model_id: 3 };
        let kind = kind_of(&register);
        assert_eq!(KINDS[answered_as(kind, Some(&dup))], "duplicate");
        assert_eq!(KINDS[answered_as(kind, Some(&ok))], "register");
        let bye = ToPrimary::Bye {
            group: 0,
            chain: aiperf_records::digest::GroupChain {
                group: 0,
                ranks: 1,
                chains: Vec::new(),
            },
        };
        assert_eq!(KINDS[answered_as(kind_of(&bye), None)], "bye");
        // Only a Register can be a duplicate.
        assert_eq!(answered_as(RESULT, Some(&dup)), RESULT);
    }

    #[test]
    fn thread_cpu_time_advances_with_work_on_this_thread() {
        let before = thread_cpu_s();
        let mut x = 0u64;
        for _ in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let after = thread_cpu_s();
        assert!(after > before, "{before} -> {after}");
    }
}
