//! The primary's MPI loop: receives from any rank, hands each message with its sender to
//! the state machine, sends the reply, prints the status line and runs the stall watchdog,
//! until every group has said goodbye or stalled.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mpi::point_to_point::Destination;
use mpi::traits::Communicator;

use super::served::{answered_as, kind_of, thread_cpu_s, Served, Spent};
use super::{Primary, PrimaryError, RecordSink};
use crate::config::Intervals;
use crate::roles::status::{process_cpu_s, StatusLine};
use crate::roles::watchdog::Watchdog;
use crate::world::clock::Clock;
use crate::world::protocol::{decode, encode, ToPrimary, DEFAULT_LIMIT_BYTES};
use crate::world::transport::{receive_any, TransportError};

/// What the loop needs besides the state.
pub struct ServeConfig<'a> {
    /// The run's start on the common clock.
    pub t0_s: f64,
    /// The run's deadline on the common clock.
    pub deadline_s: f64,
    /// Rank 0's clock.
    pub clock: Clock,
    /// Status and stall intervals.
    pub intervals: Intervals,
    /// Every rank's host (for messages).
    pub hosts: &'a [String],
    /// World rank of each group's leader.
    pub leaders: &'a [usize],
    /// Set by SIGTERM/SIGINT.
    pub interrupted: &'a AtomicBool,
    /// The records folder (for messages).
    pub records: &'a Path,
}

/// How serving ended.
#[derive(Clone, Debug, PartialEq)]
pub struct ServeOutcome {
    /// The run's end on the common clock.
    pub end_s: f64,
    /// Groups that stalled.
    pub stalled: Vec<usize>,
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A message could not be received or decoded.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A message broke the protocol, or a record failed.
    #[error(transparent)]
    Primary(#[from] PrimaryError),
}

/// Serves every group until each has said goodbye or stalled.
pub fn serve<C: Communicator, S: RecordSink>(
    world: &C,
    p: &mut Primary<S>,
    cfg: &ServeConfig<'_>,
) -> Result<ServeOutcome, ServeError> {
    let start = cfg.clock.now();
    let mut watchdog = Watchdog::new(cfg.leaders.len(), start, cfg.intervals.stall_timeout_s);
    let mut status = StatusLine::new(start, cfg.intervals.status_s);
    let (served, cpu0) = (Instant::now(), process_cpu_s());
    let mut cost = Served::default();
    while watchdog.live() > 0 {
        let received = receive_any(world, Duration::from_secs(1), DEFAULT_LIMIT_BYTES)?;
        let now = cfg.clock.now();
        if let Some(line) = status.due(now, cfg.t0_s, p.totals(), p.trial_counts()) {
            log::info!("{line}");
        }
        for (g, silent) in watchdog.check(now) {
            let r = cfg.leaders[g];
            log::error!(
                "group {g} (leader rank {r} on {}) made no progress for {silent:.0} s (--stall-timeout {:.0}): stopping the run; its completed epochs are in group-{g}.h5",
                cfg.hosts.get(r).map_or("?", String::as_str),
                cfg.intervals.stall_timeout_s
            );
        }
        let Some((bytes, src)) = received else {
            continue;
        };
        let (handling, cpu) = (Instant::now(), thread_cpu_s());
        let msg: ToPrimary = decode(&bytes, DEFAULT_LIMIT_BYTES)
            .map_err(|source| TransportError::Protocol { from: src, source })?;
        let decoded = thread_cpu_s();
        let g = p
            .group_of(src)
            .ok_or(PrimaryError::NotALeader { rank: src })? as usize;
        watchdog.seen(g, now);
        if matches!(msg, ToPrimary::Bye { .. }) {
            watchdog.done(g);
        }
        let halt = cfg.interrupted.load(Ordering::Relaxed) || !watchdog.stalled().is_empty();
        let kind = kind_of(&msg);
        let reply = p.handle(src, msg, now, halt)?;
        let kind = answered_as(kind, reply.as_ref());
        let reply = reply.map(|r| encode(&r));
        // CPU time handling up to the encoded reply, as the bench measures it; wall time
        // with the send.
        let handled = thread_cpu_s();
        if let Some(bytes) = &reply {
            world.process_at_rank(src).send(&bytes[..]);
        }
        let spent = Spent {
            wall_s: handling.elapsed().as_secs_f64(),
            decode_cpu_s: decoded - cpu,
            cpu_s: handled - decoded,
            reply_bytes: reply.map_or(0, |b| b.len()),
        };
        cost.add(kind, spent);
    }
    // The last status line, at the end: every batch log ends with the run's totals, however
    // short the run was against --status-interval.
    let now = cfg.clock.now();
    log::info!(
        "{}",
        crate::roles::status::line(now - cfg.t0_s, p.totals(), p.trial_counts())
    );
    let (wall, cpu) = (served.elapsed().as_secs_f64(), process_cpu_s() - cpu0);
    log::info!("{}", cost.served_line(cfg.leaders.len(), wall, cpu));
    log::info!("{}", cost.cost_line(p.trial_counts().finished));
    Ok(ServeOutcome {
        end_s: p.end().unwrap_or(now.min(cfg.deadline_s)).min(now),
        stalled: watchdog.stalled(),
    })
}
