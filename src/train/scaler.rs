//! Dynamic loss scaling for fp16 training (docs/design.md §3), with the defaults of PyTorch's
//! `torch.amp.GradScaler`: the loss is multiplied by the scale before backward and the
//! gradients divided by it before the update; a step whose summed gradients are not finite
//! is skipped and the scale halved; after 2,000 finite steps in a row the scale doubles.
//! When the scale falls below its floor the trial's loss is taken to stay non-finite.

/// What to do with a step after its gradients were exchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepAction {
    /// The gradients are finite: apply the update.
    Apply,
    /// Not finite: skip this update (the scale was halved).
    Skip,
    /// Not finite and the scale is at its floor: the trial fails.
    GiveUp,
}

/// The loss scale and its schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct LossScaler {
    scale: f64,
    good_steps: u32,
    growth_interval: u32,
    floor: f64,
}

impl Default for LossScaler {
    /// GradScaler's defaults: initial scale 2^16, growth ×2 every 2,000 finite steps, back-off
    /// ×0.5; floor 2^-14 (the smallest normal fp16 value).
    fn default() -> Self {
        LossScaler {
            scale: 65536.0,
            good_steps: 0,
            growth_interval: 2000,
            floor: 2f64.powi(-14),
        }
    }
}

impl LossScaler {
    /// The factor the loss is multiplied by.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Updates the scale after a step whose summed gradients were `finite` (the same
    /// verdict on every rank, since it is read from the reduced gradients).
    pub fn update(&mut self, finite: bool) -> StepAction {
        if finite {
            self.good_steps += 1;
            if self.good_steps >= self.growth_interval {
                self.scale *= 2.0;
                self.good_steps = 0;
            }
            return StepAction::Apply;
        }
        self.good_steps = 0;
        self.scale *= 0.5;
        if self.scale < self.floor {
            StepAction::GiveUp
        } else {
            StepAction::Skip
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_halves_and_skips_growth_doubles_after_the_interval() {
        let mut s = LossScaler::default();
        assert_eq!(s.update(false), StepAction::Skip);
        assert_eq!(s.scale(), 32768.0);
        for _ in 0..1999 {
            assert_eq!(s.update(true), StepAction::Apply);
        }
        assert_eq!(s.scale(), 32768.0);
        s.update(true);
        assert_eq!(s.scale(), 65536.0);
        // A non-finite step in between restarts the count.
        for _ in 0..1000 {
            s.update(true);
        }
        s.update(false);
        for _ in 0..1999 {
            s.update(true);
        }
        assert_eq!(s.scale(), 32768.0);
    }

    #[test]
    fn a_loss_that_stays_non_finite_gives_up_at_the_floor() {
        let mut s = LossScaler::default();
        let mut steps = 0;
        while s.update(false) == StepAction::Skip {
            steps += 1;
            assert!(steps < 100, "must give up");
        }
        // 2^16 down to below 2^-14: 31 halvings.
        assert_eq!(steps, 30);
    }
}
