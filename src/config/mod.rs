//! A run's configuration: the presets, the command-line flags applied to them in one typed
//! step, and the recorded configuration — the serde type written to `primary.h5` at the
//! start and read back, unchanged, by `--resume` and by the scorer. Fresh and resumed runs
//! go through the same validation; a flag that the records fix is an error on resume.

mod flags;
mod preset;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use flags::{parse_batch_size, RunFlags};
pub use preset::{
    Preset, BUCKET_BYTES, DATASETS, MAX_BATCH, MAX_DURATION_S, MAX_EPOCHS, MAX_LOADER_WORKERS,
    MAX_TRACE_STEPS, MIN_SECONDS, PRESETS, STARTS,
};

use crate::arch::Shape;

/// The trainer of `aiperf run`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrainerKind {
    /// libtorch: real training, data-parallel within each group.
    Real,
    /// No tensors: epoch time from the op count and --sim-ops, accuracy from a learning curve.
    Simulated,
    /// The accelerator emulated as waits at --emulated-ops, the exchange of the real
    /// parameter count real every step; accuracy from the simulated learning curve.
    Emulated,
}

/// The simulated trainer's settings (recorded for every run; used by `simulated` only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimSettings {
    /// Sustained operations per second of one accelerator.
    pub ops: f64,
    /// Training images per epoch.
    pub train_images: u64,
    /// Validation images per epoch.
    pub val_images: u64,
    /// Simulated seconds per wall-clock second.
    pub speedup: f64,
    /// Input size, `HxWxC`.
    pub input: String,
    /// Classes.
    pub classes: u32,
}

/// How often the run reports, samples and checks (may change on resume).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intervals {
    /// Seconds between rank 0's status lines.
    pub status_s: f64,
    /// Seconds a group may stay silent before the run is stopped as stalled.
    pub stall_timeout_s: f64,
    /// Seconds between resource samples.
    pub monitor_s: f64,
}

/// Everything a run was configured with, as written to `primary.h5` (`config` attribute).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedConfig {
    /// The preset after the command-line overrides.
    pub preset: Preset,
    /// The trainer.
    pub trainer: TrainerKind,
    /// The data folder (`None`: `$AIPERF_DATA/<dataset>`, else `data/<dataset>`).
    pub data: Option<PathBuf>,
    /// Ranks per group (`None`: one group per node).
    pub group_size: Option<usize>,
    /// CPU threads per training rank (`None`: the node's cores shared by its ranks).
    pub threads: Option<usize>,
    /// The simulated trainer's settings.
    pub sim: SimSettings,
    /// Seed of everything.
    pub seed: u64,
    /// Threads of each leader's search pool.
    pub search_threads: usize,
    /// Reporting and fault-detection intervals.
    pub intervals: Intervals,
    /// Every rank's clock offset to rank 0 at the start, seconds.
    pub clock_offsets_s: Vec<f64>,
    /// Their uncertainty (half the best round trip), seconds.
    pub clock_uncertainty_s: Vec<f64>,
    /// What the start-up probe timed to resolve `auto` precision or memory format: every
    /// candidate's seconds per step summed over the training ranks (empty when nothing was
    /// `auto`, and in records written before the probe timed precisions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arithmetic_probe: Vec<crate::train::probe::ProbeTime>,
    /// `--stop-after-epochs`: the run ends once this many epochs are recorded over all
    /// groups (absent: at its duration only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_after_epochs: Option<u64>,
    /// `--stop-after-trials`: the run ends once this many trials ended over all groups
    /// (absent: at its duration only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_after_trials: Option<u64>,
}

/// A configuration that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A flag is out of range or malformed.
    #[error("{flag}: {message}")]
    Flag {
        /// The flag as typed, e.g. `--duration`.
        flag: &'static str,
        /// What is wrong and the allowed range.
        message: String,
    },
    /// The preset (built-in name or file) is unusable.
    #[error("{0}")]
    Preset(String),
    /// The preset is fine but an override broke it.
    #[error("{0} (after the command-line overrides)")]
    Override(String),
    /// `--resume` was given flags its records fix.
    #[error("--resume {dir}: {flags} cannot change when a run is resumed (its records fix them); drop them, or start a new run")]
    FixedOnResume {
        /// The records folder.
        dir: String,
        /// The offending flags.
        flags: String,
    },
    /// The recorded configuration is unreadable.
    #[error("--resume {dir}: its recorded configuration: {message}")]
    Recorded {
        /// The records folder.
        dir: String,
        /// What is wrong.
        message: String,
    },
}

fn flag_err(flag: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Flag {
        flag,
        message: message.into(),
    }
}

/// A finite number in `[lo, hi]`, or an error naming the flag.
fn in_range(flag: &'static str, v: f64, lo: f64, hi: f64, unit: &str) -> Result<f64, ConfigError> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(flag_err(
            flag,
            format!("must be a number from {lo} to {hi}{unit}, got {v}"),
        ))
    }
}

/// A whole number in `[lo, hi]`, or an error naming the flag.
fn count_in<T: Into<u64> + Copy>(
    flag: &'static str,
    v: T,
    lo: u64,
    hi: u64,
) -> Result<T, ConfigError> {
    let x: u64 = v.into();
    if (lo..=hi).contains(&x) {
        Ok(v)
    } else {
        Err(flag_err(flag, format!("must be in {lo}..={hi}, got {x}")))
    }
}

/// The largest thread count a flag may ask for.
pub const MAX_THREADS: usize = 4096;

/// Checks the flags that may also be given on resume (no I/O).
fn operational(f: &RunFlags, base: Intervals) -> Result<Intervals, ConfigError> {
    if let Some(t) = f.threads {
        count_in("--threads", t as u64, 1, MAX_THREADS as u64)?;
    }
    if let Some(g) = f.group_size {
        count_in("--group-size", g as u64, 1, 1 << 20)?;
    }
    let day = 86_400.0;
    Ok(Intervals {
        status_s: f.status_interval.map_or(Ok(base.status_s), |v| {
            in_range("--status-interval", v, 0.1, 30.0 * day, " seconds")
        })?,
        stall_timeout_s: f.stall_timeout.map_or(Ok(base.stall_timeout_s), |v| {
            in_range("--stall-timeout", v, 1.0, 365.0 * day, " seconds")
        })?,
        monitor_s: f.monitor_interval.map_or(Ok(base.monitor_s), |v| {
            in_range("--monitor-interval", v, 0.1, day, " seconds")
        })?,
    })
}

/// The flags that change how every trial trains: precision, tracing, the exchange.
fn training_overrides(t: &mut crate::train::TrainConfig, f: &RunFlags) -> Result<(), ConfigError> {
    if let Some(x) = f.precision {
        t.precision = x;
    }
    if let Some(x) = f.memory_format {
        t.memory_format = x;
    }
    if let Some(n) = f.trace_steps {
        t.trace_steps = count_in("--trace-steps", n, 0, u64::from(MAX_TRACE_STEPS))?;
    }
    f.exchange
        .apply(&mut t.exchange)
        .map_err(|e| flag_err(e.flag, e.message))?;
    if let Some(a) = f.augment_on {
        t.augment_on = a;
    }
    if let Some(n) = f.loader_workers {
        t.loader_workers = count_in("--loader-workers", n, 1, MAX_LOADER_WORKERS as u64)? as usize;
    }
    Ok(())
}

/// The simulated and emulated trainers' settings (recorded for every run).
fn sim_settings(f: &RunFlags) -> Result<SimSettings, ConfigError> {
    let input = f.input.unwrap_or(Shape::new(3, 32, 32));
    Ok(SimSettings {
        ops: match (f.emulated_ops, f.trainer) {
            (Some(_), t) if t != Some(TrainerKind::Emulated) => return Err(flag_err(
                "--emulated-ops",
                "applies to --trainer emulated only (the simulated trainer's speed is --sim-ops)",
            )),
            (Some(o), _) => in_range("--emulated-ops", o, 1.0, 1e21, " ops/s")?,
            (None, _) => in_range("--sim-ops", f.sim_ops.unwrap_or(1e13), 1.0, 1e21, " ops/s")?,
        },
        train_images: count_in(
            "--sim-train-images",
            f.sim_train_images.unwrap_or(50_000),
            1,
            1 << 40,
        )?,
        val_images: count_in(
            "--sim-val-images",
            f.sim_val_images.unwrap_or(10_000),
            1,
            1 << 40,
        )?,
        speedup: in_range("--speedup", f.speedup.unwrap_or(100.0), 1e-3, 1e9, "")?,
        input: format!("{}x{}x{}", input.h, input.w, input.c),
        classes: count_in("--classes", f.classes.unwrap_or(10), 1, 1 << 20)?,
    })
}

/// The defaults of the interval flags.
pub const DEFAULT_INTERVALS: Intervals = Intervals {
    status_s: 60.0,
    stall_timeout_s: 7200.0,
    monitor_s: 30.0,
};

impl RecordedConfig {
    /// A new run's configuration: the preset named by `--config` with the flags applied,
    /// every value range-checked (no I/O besides reading a preset file).
    pub fn fresh(f: &RunFlags) -> Result<RecordedConfig, ConfigError> {
        let mut p = Preset::load(f.config.as_deref().unwrap_or("fashion-mnist"))
            .map_err(ConfigError::Preset)?;
        if let Some(d) = f.duration {
            p.duration_s = in_range("--duration", d, MIN_SECONDS, MAX_DURATION_S, " seconds")?;
        }
        if let Some(e) = f.epochs {
            p.epochs = count_in("--epochs", e, 1, u64::from(MAX_EPOCHS))?;
        }
        if let Some(s) = &f.start {
            if !STARTS.contains(&s.as_str()) {
                return Err(flag_err(
                    "--start",
                    format!("{s:?}: use one of {}", STARTS.join(", ")),
                ));
            }
            p.start.clone_from(s);
        }
        if let Some(n) = f.train_images {
            p.train.train_images =
                Some(count_in("--train-images", n as u64, 1, u64::MAX)? as usize);
        }
        if let Some(n) = f.val_images {
            p.train.val_images = Some(count_in("--val-images", n as u64, 1, u64::MAX)? as usize);
        }
        if let Some(b) = &f.batch_size {
            let (lo, hi) = parse_batch_size(b).map_err(|m| flag_err("--batch-size", m))?;
            if lo == 0 || lo > hi || hi > MAX_BATCH {
                return Err(flag_err(
                    "--batch-size",
                    format!("needs 1 <= MIN <= MAX <= {MAX_BATCH}, got {lo}:{hi}"),
                ));
            }
            p.batch_size = (lo, hi);
        }
        training_overrides(&mut p.train, f)?;
        if let Some(i) = f.score_interval {
            p.score_interval_s = in_range(
                "--score-interval",
                i,
                MIN_SECONDS,
                MAX_DURATION_S,
                " seconds",
            )?;
        }
        p.validate().map_err(ConfigError::Override)?;
        let sim = sim_settings(f)?;
        let search_threads = f.search_threads.unwrap_or(1);
        count_in(
            "--search-threads",
            search_threads as u64,
            1,
            MAX_THREADS as u64,
        )?;
        Ok(RecordedConfig {
            preset: p,
            trainer: f.trainer.unwrap_or(TrainerKind::Real),
            data: f.data.clone(),
            group_size: f.group_size,
            threads: f.threads,
            sim,
            seed: f.seed.unwrap_or(0),
            search_threads,
            intervals: operational(f, DEFAULT_INTERVALS)?,
            clock_offsets_s: Vec::new(),
            clock_uncertainty_s: Vec::new(),
            arithmetic_probe: Vec::new(),
            stop_after_epochs: (f.stop_after_epochs)
                .map(|n| count_in("--stop-after-epochs", n, 1, 1 << 40))
                .transpose()?,
            stop_after_trials: (f.stop_after_trials)
                .map(|n| count_in("--stop-after-trials", n, 1, 1 << 40))
                .transpose()?,
        })
    }

    /// A resumed run's configuration: the recorded one (JSON from `primary.h5`) with the
    /// flags that may change applied (data folder, layout, threads, intervals).
    pub fn resumed(
        f: &RunFlags,
        dir: &Path,
        recorded_json: &str,
    ) -> Result<RecordedConfig, ConfigError> {
        Self::check_resume_flags(f, dir)?;
        let recorded = |message: String| ConfigError::Recorded {
            dir: dir.display().to_string(),
            message,
        };
        let mut c: RecordedConfig = serde_json::from_str(recorded_json).map_err(|e| {
            recorded(format!(
                "{e} (written by another aiperf version? resume it with that one)"
            ))
        })?;
        c.preset.validate().map_err(recorded)?;
        c.sim_input().map_err(recorded)?;
        c.intervals = operational(f, c.intervals)?;
        if f.data.is_some() {
            c.data.clone_from(&f.data);
        }
        if f.group_size.is_some() {
            c.group_size = f.group_size;
        }
        if f.threads.is_some() {
            c.threads = f.threads;
        }
        Ok(c)
    }

    /// Refuses, before anything is read, the flags a resumed run may not give, and checks
    /// the ranges of those it may.
    pub fn check_resume_flags(f: &RunFlags, dir: &Path) -> Result<(), ConfigError> {
        let fixed = f.fixed_by_records();
        if !fixed.is_empty() {
            return Err(ConfigError::FixedOnResume {
                dir: dir.display().to_string(),
                flags: fixed.join(", "),
            });
        }
        operational(f, DEFAULT_INTERVALS).map(|_| ())
    }

    /// The simulated trainer's input shape.
    pub fn sim_input(&self) -> Result<Shape, String> {
        self.sim.input.parse()
    }

    /// The data folder: the recorded one, else `$AIPERF_DATA/<dataset>`, else
    /// `data/<dataset>`.
    pub fn data_dir(&self) -> PathBuf {
        self.data.clone().unwrap_or_else(|| {
            std::env::var_os("AIPERF_DATA")
                .map_or_else(|| PathBuf::from("data"), PathBuf::from)
                .join(&self.preset.dataset)
        })
    }

    /// The configuration as the JSON of the `config` attribute.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("the configuration serialises")
    }
}

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod recorded_tests;
#[cfg(test)]
mod rules_tests;
#[cfg(test)]
mod tests;
