//! Faults for the project's tests, injected through the trainer interface (a test double
//! wrapping the real or simulated trainer), chosen by `aiperf run --fault` (hidden): a
//! group that hangs, a rank that panics, a trial whose loss turns non-finite.

use std::time::Duration;

use mpi::topology::SimpleCommunicator;

use super::{EpochStats, TrainError, Trainer, TrialRun, TrialSpec};

/// A fault to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Every rank of this group hangs at the start of each trial's second epoch (after its
    /// first epoch is recorded), forever.
    Hang {
        /// The group.
        group: u32,
    },
    /// This world rank panics at the start of its first epoch.
    Panic {
        /// The world rank.
        rank: u32,
    },
    /// Every group's trial of this round (0-based) reports a non-finite loss from its
    /// second epoch on.
    NonFinite {
        /// The round.
        round: u32,
    },
    /// Every trial reports a non-finite loss from its first epoch on (training that
    /// diverges at once, as with a learning rate far too high).
    NonFiniteAll,
}

impl std::str::FromStr for Fault {
    type Err = String;

    /// `hang:GROUP`, `panic:RANK`, `nan:ROUND` or `nan:all`.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "nan:all" {
            return Ok(Fault::NonFiniteAll);
        }
        let (kind, n) = s.split_once(':').unwrap_or((s, ""));
        let n: u32 = n.parse().map_err(|_| {
            format!("--fault {s:?}: expected hang:GROUP, panic:RANK, nan:ROUND or nan:all")
        })?;
        match kind {
            "hang" => Ok(Fault::Hang { group: n }),
            "panic" => Ok(Fault::Panic { rank: n }),
            "nan" => Ok(Fault::NonFinite { round: n }),
            _ => Err(format!(
                "--fault {s:?}: expected hang:GROUP, panic:RANK, nan:ROUND or nan:all"
            )),
        }
    }
}

/// A trainer whose trials misbehave as `fault` says.
pub struct FaultyTrainer {
    /// The trainer doing the work.
    pub inner: Box<dyn Trainer>,
    /// The fault.
    pub fault: Fault,
    /// This rank's world rank.
    pub world_rank: u32,
    /// This rank's group.
    pub group: u32,
}

struct FaultyRun<'c> {
    inner: Box<dyn TrialRun + 'c>,
    fault: Fault,
    world_rank: u32,
    group: u32,
    round: u32,
}

impl Trainer for FaultyTrainer {
    fn start<'c>(
        &'c self,
        comm: &'c SimpleCommunicator,
        spec: &TrialSpec,
        round: u32,
    ) -> Result<Box<dyn TrialRun + 'c>, TrainError> {
        Ok(Box::new(FaultyRun {
            inner: self.inner.start(comm, spec, round)?,
            fault: self.fault,
            world_rank: self.world_rank,
            group: self.group,
            round,
        }))
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

impl TrialRun for FaultyRun<'_> {
    fn epoch(&mut self, epoch: u32, stop: &dyn Fn() -> bool) -> Result<EpochStats, TrainError> {
        match self.fault {
            Fault::Hang { group } if group == self.group && epoch >= 2 => {
                log::warn!("group {group}: hanging (--fault)");
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            Fault::Panic { rank } if rank == self.world_rank => {
                panic!("rank {rank}: injected panic (--fault)");
            }
            Fault::NonFinite { round } if round == self.round && epoch >= 2 => {
                let mut e = self.inner.epoch(epoch, stop)?;
                e.non_finite = !e.abandoned;
                e.figures.train_loss = f64::NAN;
                Ok(e)
            }
            Fault::NonFiniteAll => {
                let mut e = self.inner.epoch(epoch, stop)?;
                e.non_finite = !e.abandoned;
                e.figures.train_loss = f64::NAN;
                Ok(e)
            }
            _ => self.inner.epoch(epoch, stop),
        }
    }

    fn params_hash(&self) -> Option<u64> {
        self.inner.params_hash()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_bad_ones_name_the_flag() {
        assert_eq!("hang:1".parse(), Ok(Fault::Hang { group: 1 }));
        assert_eq!("panic:2".parse(), Ok(Fault::Panic { rank: 2 }));
        assert_eq!("nan:0".parse(), Ok(Fault::NonFinite { round: 0 }));
        assert_eq!("nan:all".parse(), Ok(Fault::NonFiniteAll));
        for bad in ["hang", "explode:1", "panic:-1"] {
            assert!(bad.parse::<Fault>().unwrap_err().contains("--fault"));
        }
    }
}
