//! The scoring grid (docs/design.md §5): the points in time the score is read at, its
//! official step, its limits, and why a grid cannot be built.

/// The official grid step: 0.1 h.
pub const OFFICIAL_INTERVAL_S: f64 = 360.0;

/// At most this many grid steps before the run's end (the timeline holds them and the end).
pub const MAX_GRID_STEPS: usize = 1_000_000;

/// Why a grid cannot be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GridError {
    /// The step is zero, negative, NaN or infinite.
    #[error("--interval {}: the grid step must be a positive, finite number of seconds (official: {OFFICIAL_INTERVAL_S})", seconds(*interval_s))]
    Step {
        /// The step asked for.
        interval_s: f64,
    },
    /// The run's duration is not a positive, finite number of seconds.
    #[error("the run's duration {} s is not a positive, finite number of seconds: check its start and end times", seconds(*duration_s))]
    Duration {
        /// t_end − t0.
        duration_s: f64,
    },
    /// The step would give more than [`MAX_GRID_STEPS`] points.
    #[error("--interval {} s makes {steps:.3e} grid steps over the run's {} s, more than the {MAX_GRID_STEPS} allowed: use --interval {} or more", seconds(*interval_s), seconds(*duration_s), seconds(*min_interval_s))]
    TooFine {
        /// The step asked for.
        interval_s: f64,
        /// t_end − t0.
        duration_s: f64,
        /// Steps it would make.
        steps: f64,
        /// The smallest step allowed for this run.
        min_interval_s: f64,
    },
}

/// Seconds as people write them: plain in the usual range, else in scientific notation.
fn seconds(v: f64) -> String {
    if v == 0.0 || (1e-3..1e9).contains(&v.abs()) || !v.is_finite() {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// The grid of docs/design.md §5 in seconds since t0: every k·`interval_s` strictly before
/// `duration_s`, then `duration_s`. Refuses (instead of building without bound) a step that
/// is not positive and finite or that makes more than [`MAX_GRID_STEPS`] points.
pub fn grid(duration_s: f64, interval_s: f64) -> Result<Vec<f64>, GridError> {
    if !(interval_s.is_finite() && interval_s > 0.0) {
        return Err(GridError::Step { interval_s });
    }
    if !(duration_s.is_finite() && duration_s > 0.0) {
        return Err(GridError::Duration { duration_s });
    }
    let steps = duration_s / interval_s;
    // Finite arguments: `steps` is a number (perhaps infinite), never NaN. A relative slack
    // of 1e-9 lets the suggested smallest step itself pass.
    if steps > MAX_GRID_STEPS as f64 * (1.0 + 1e-9) {
        return Err(GridError::TooFine {
            interval_s,
            duration_s,
            steps,
            min_interval_s: duration_s / MAX_GRID_STEPS as f64,
        });
    }
    let mut points: Vec<f64> = (1..=MAX_GRID_STEPS)
        .map(|k| k as f64 * interval_s)
        .take_while(|&t| t < duration_s)
        .collect();
    points.push(duration_s);
    Ok(points)
}
