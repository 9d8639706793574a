//! The run presets (`aiperf run --config <preset|file.json>`): the dataset, start
//! architecture, run length, epoch budgets, hyperparameter space and training settings of a
//! benchmark run. `imagenet` is the official configuration (docs/design.md §3 and §5);
//! `fashion-mnist` is the small default that `make run` uses; `cifar10` sits between. A
//! JSON file with the same fields defines a custom run (unknown keys are errors, at every
//! level). Command-line flags override some fields (see `super::RunFlags`).

use serde::{Deserialize, Serialize};

use crate::data::Augment;
use crate::exchange::ExchangeConfig;
use crate::search::Hparams;
use crate::train::{MemoryFormat, Precision, TrainConfig};

/// A complete run configuration before command-line overrides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// Its name (recorded; the official rules require `imagenet`).
    pub name: String,
    /// Dataset: the folder name under the data directory holding `train.aipk` and
    /// `val.aipk` (from `aiperf-data-prep`).
    pub dataset: String,
    /// Start architecture (`aiperf ops --arch` names: resnet8, resnet20, resnet18, resnet50).
    pub start: String,
    /// Run length, seconds.
    pub duration_s: f64,
    /// Full epoch budget; warm-up rounds 1–3 train ¼, ½ and ¾ of it (docs/design.md §3).
    pub epochs: u32,
    /// Scale of the patience rule min(6 + 2·round, 20) (reference: 1 for 60 epochs).
    pub patience_scale: f64,
    /// Per-rank batch-size range searched by TPE (inclusive).
    pub batch_size: (u32, u32),
    /// Kernel sizes of the deeper morphism searched by TPE.
    pub kernel_sizes: Vec<u32>,
    /// Training settings.
    pub train: TrainConfig,
    /// Step of the score's timeline, seconds (official 0.1 h).
    pub score_interval_s: f64,
}

fn positive(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

fn non_negative(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

/// The longest run a preset or `--duration` may ask for: a year, in seconds.
pub const MAX_DURATION_S: f64 = 3.2e7;
/// The largest epoch budget.
pub const MAX_EPOCHS: u32 = 10_000;
/// The largest per-rank batch size.
pub const MAX_BATCH: u32 = 65_536;

/// The largest `train.lr_per_256`: far above any trainable rate, and kept finite in the
/// optimizer's single precision at any global batch.
pub const MAX_LR_PER_256: f64 = 100.0;
/// The largest `train.weight_decay` (a decay of 1 already zeroes weights each step).
pub const MAX_WEIGHT_DECAY: f64 = 1.0;

/// The largest `train.trace_steps` (`--trace-steps`).
pub const MAX_TRACE_STEPS: u32 = 1 << 20;
pub use crate::exchange::BUCKET_BYTES;
/// The most loader threads per rank (`train.loader_workers`, `--loader-workers`).
pub const MAX_LOADER_WORKERS: usize = 256;
/// The deepest loader prefetch, batches per worker.
pub const MAX_PREFETCH: usize = 64;
/// The shortest run and score interval a preset or flag may give, seconds.
pub const MIN_SECONDS: f64 = 1e-3;
/// The datasets `aiperf-data-prep` packs: a preset's `dataset` names one of them (it picks
/// the default data folder; `--data` points at any folder of packs).
pub const DATASETS: [&str; 4] = ["fashion-mnist", "mnist", "cifar10", "imagenet"];
/// The start architectures (`aiperf ops --arch` names).
pub const STARTS: [&str; 4] = ["resnet8", "resnet20", "resnet18", "resnet50"];

/// The built-in presets' names.
pub const PRESETS: [&str; 3] = ["fashion-mnist", "cifar10", "imagenet"];

impl Preset {
    /// A built-in preset by name.
    pub fn builtin(name: &str) -> Option<Preset> {
        let base = base_train();
        match name {
            // Sized for `make run` on 2 CPU cores (mpirun -np 3: one group of two ranks):
            // 9 minutes of search. Small batches: in a short budget more steps per image
            // learn faster (measured: 89.7 % vs 87.8 % validation accuracy after 80,000
            // images at per-rank batch 32 vs 128).
            "fashion-mnist" => Some(Preset {
                name: name.into(),
                dataset: "fashion-mnist".into(),
                start: "resnet8".into(),
                duration_s: 540.0,
                epochs: 8,
                patience_scale: 0.25,
                batch_size: (16, 64),
                kernel_sizes: vec![3, 5, 7],
                train: TrainConfig {
                    lr_per_256: 0.4,
                    warmup_epochs: 0.3,
                    train_images: Some(20_000),
                    val_images: Some(10_000),
                    ..base
                },
                score_interval_s: 30.0,
            }),
            "cifar10" => Some(Preset {
                name: name.into(),
                dataset: "cifar10".into(),
                start: "resnet20".into(),
                duration_s: 3600.0,
                epochs: 30,
                patience_scale: 0.5,
                batch_size: (32, 256),
                kernel_sizes: vec![3, 5, 7],
                train: TrainConfig {
                    lr_per_256: 0.2,
                    warmup_epochs: 1.0,
                    augment: Augment::CropFlip { pad: 4 },
                    ..base
                },
                score_interval_s: 360.0,
            }),
            // The official rules: ImageNet, ResNet-50 start, 60-epoch budget with the
            // reference's warm-up rounds, at least an hour.
            "imagenet" => Some(Preset {
                name: name.into(),
                dataset: "imagenet".into(),
                start: "resnet50".into(),
                duration_s: 3600.0 * 2.0,
                epochs: 60,
                patience_scale: 1.0,
                batch_size: (32, 256),
                kernel_sizes: vec![3, 5, 7],
                train: TrainConfig {
                    lr_per_256: 0.1,
                    warmup_epochs: 1.0,
                    augment: Augment::random_resized_crop(224),
                    val_augment: Augment::CenterCrop { size: 224 },
                    val_batch: 128,
                    loader_workers: 6,
                    prefetch: 3,
                    ..base
                },
                score_interval_s: 360.0,
            }),
            _ => None,
        }
    }

    /// A preset name, or a JSON file with a complete preset.
    pub fn load(spec: &str) -> Result<Preset, String> {
        if let Some(p) = Preset::builtin(spec) {
            return Ok(p);
        }
        let path = std::path::Path::new(spec);
        if !path.exists() {
            return Err(format!(
                "--config {spec:?}: neither a preset ({}) nor an existing JSON file",
                PRESETS.join(", ")
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--config {}: {e}", path.display()))?;
        let p = parse(&text).map_err(|e| format!("--config {}: {e}", path.display()))?;
        p.validate()
            .map_err(|e| format!("--config {}: {e}", path.display()))?;
        Ok(p)
    }

    /// Checks every field's range: the one check for built-in presets, preset files and
    /// the flags that override them (the flags' own messages use the same limits).
    pub fn validate(&self) -> Result<(), String> {
        self.check_run()?;
        check_train(&self.train)
    }

    /// The run's fields: names, length, budgets and the search space.
    fn check_run(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("name must not be empty".into());
        }
        if !DATASETS.contains(&self.dataset.as_str()) {
            return Err(format!(
                "dataset must be one of {} (the datasets aiperf-data-prep packs; --data points at any folder of packs), got {:?}",
                DATASETS.join(", "),
                self.dataset
            ));
        }
        if !STARTS.contains(&self.start.as_str()) {
            return Err(format!(
                "start must be one of {}, got {:?}",
                STARTS.join(", "),
                self.start
            ));
        }
        let seconds = MIN_SECONDS..=MAX_DURATION_S;
        if !seconds.contains(&self.duration_s) {
            return Err(format!(
                "duration_s must be from {MIN_SECONDS} to {MAX_DURATION_S:e} s (a year), got {}",
                self.duration_s
            ));
        }
        if !seconds.contains(&self.score_interval_s) {
            return Err(format!(
                "score_interval_s must be from {MIN_SECONDS} to {MAX_DURATION_S:e} s, got {}",
                self.score_interval_s
            ));
        }
        if self.epochs == 0 || self.epochs > MAX_EPOCHS {
            return Err(format!(
                "epochs must be in 1..={MAX_EPOCHS}, got {}",
                self.epochs
            ));
        }
        if !positive(self.patience_scale) || self.patience_scale > 1e3 {
            return Err(format!(
                "patience_scale must be positive and at most 1000, got {}",
                self.patience_scale
            ));
        }
        if self.batch_size.0 == 0
            || self.batch_size.0 > self.batch_size.1
            || self.batch_size.1 > MAX_BATCH
        {
            return Err(format!(
                "batch_size must be a range 1 <= min <= max <= {MAX_BATCH}, got {:?}",
                self.batch_size
            ));
        }
        if self.kernel_sizes.is_empty() || self.kernel_sizes.iter().any(|&k| k % 2 == 0 || k > 15) {
            return Err(format!(
                "kernel_sizes must be odd sizes up to 15, got {:?}",
                self.kernel_sizes
            ));
        }
        Ok(())
    }

    /// The hyperparameters of warm-up trials without a trained father (docs/design.md §2: rounds
    /// 1–3 use the father's best hyperparameters or the preset's defaults): the batch size
    /// in the middle of the range, the first kernel size.
    pub fn default_hparams(&self) -> Hparams {
        let (lo, hi) = self.batch_size;
        Hparams {
            batch_size: lo + (hi - lo) / 2,
            kernel_size: self.kernel_sizes.first().copied().unwrap_or(3),
        }
    }
}

/// The forms of a preset's keys that are not plain numbers or strings, for messages.
const FORMS: &[(&str, &str)] = &[
    (
        "batch_size",
        "a [min, max] pair of integers, e.g. [32, 256]",
    ),
    ("kernel_sizes", "a list of odd integers, e.g. [3, 5, 7]"),
    ("scale", "a [min, max] pair, e.g. [0.08, 1.0]"),
    ("ratio", "a [min, max] pair, e.g. [0.75, 1.3333]"),
];

/// A preset file's text as a preset: an error names the key (its path in the JSON) and, for
/// the keys that are not plain values, the form expected.
pub fn parse(text: &str) -> Result<Preset, String> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let last = e
            .path()
            .iter()
            .filter_map(|s| match s {
                serde_path_to_error::Segment::Map { key } => Some(key.as_str()),
                _ => None,
            })
            .next_back()
            .unwrap_or("");
        let form = FORMS
            .iter()
            .find(|(k, _)| *k == last)
            .map_or(String::new(), |(_, f)| format!("; expected {f}"));
        format!(
            "at `{key}`: {}{form} (write a complete preset; `aiperf run --print-config` shows one)",
            e.inner()
        )
    })
}

/// The training settings' ranges.
fn check_train(t: &TrainConfig) -> Result<(), String> {
    if !positive(t.lr_per_256) || t.lr_per_256 > MAX_LR_PER_256 {
        return Err(format!(
            "train.lr_per_256 must be positive and at most {MAX_LR_PER_256}, got {}",
            t.lr_per_256
        ));
    }
    if !(0.0..1.0).contains(&t.momentum) {
        return Err(format!(
            "train.momentum must be in [0, 1), got {}",
            t.momentum
        ));
    }
    if !non_negative(t.weight_decay) || t.weight_decay > MAX_WEIGHT_DECAY {
        return Err(format!(
            "train.weight_decay must be from 0 to {MAX_WEIGHT_DECAY}, got {}",
            t.weight_decay
        ));
    }
    if !(0.0..1.0).contains(&t.label_smoothing) {
        return Err(format!(
            "train.label_smoothing must be in [0, 1), got {}",
            t.label_smoothing
        ));
    }
    if !non_negative(t.warmup_epochs) || t.warmup_epochs > f64::from(MAX_EPOCHS) {
        return Err(format!(
            "train.warmup_epochs must be from 0 to {MAX_EPOCHS}, got {}",
            t.warmup_epochs
        ));
    }
    if t.train_images == Some(0) || t.val_images == Some(0) {
        return Err(
            "train.train_images and train.val_images must be at least 1 (or null for all images)"
                .into(),
        );
    }
    if t.val_batch == 0 || t.val_batch > MAX_BATCH as usize {
        return Err(format!(
            "train.val_batch must be in 1..={MAX_BATCH}, got {}",
            t.val_batch
        ));
    }
    if !(1..=MAX_LOADER_WORKERS).contains(&t.loader_workers)
        || !(1..=MAX_PREFETCH).contains(&t.prefetch)
    {
        return Err(format!(
            "train.loader_workers must be in 1..={MAX_LOADER_WORKERS} and train.prefetch in 1..={MAX_PREFETCH}, got {} and {}",
            t.loader_workers, t.prefetch
        ));
    }
    if t.trace_steps > MAX_TRACE_STEPS {
        return Err(format!(
            "train.trace_steps must be in 0..={MAX_TRACE_STEPS}, got {}",
            t.trace_steps
        ));
    }
    let x = &t.exchange;
    let (lo, hi) = BUCKET_BYTES;
    if !(lo..=hi).contains(&x.bucket_bytes)
        || !(lo..=x.bucket_bytes).contains(&x.first_bucket_bytes)
    {
        return Err(format!(
            "train.exchange.bucket_bytes must be in {lo}..={hi} and first_bucket_bytes in {lo}..=bucket_bytes, got {} and {}",
            x.bucket_bytes, x.first_bucket_bytes
        ));
    }
    t.augment
        .check_params()
        .map_err(|e| format!("train.augment: {e}"))?;
    t.val_augment
        .check_params()
        .map_err(|e| format!("train.val_augment: {e}"))
}

/// The training settings the built-in presets share unless they say otherwise.
fn base_train() -> TrainConfig {
    TrainConfig {
        lr_per_256: 0.1,
        momentum: 0.9,
        weight_decay: 5e-4,
        label_smoothing: 0.1,
        warmup_epochs: 0.0,
        train_images: None,
        val_images: None,
        augment: Augment::None,
        val_augment: Augment::None,
        val_batch: 256,
        loader_workers: 2,
        prefetch: 2,
        precision: Precision::Auto,
        memory_format: MemoryFormat::Auto,
        exchange: ExchangeConfig::default(),
        trace_steps: 0,
        augment_on: crate::train::AugmentOn::Auto,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid_and_round_trip_through_json_files() {
        let tmp = tempfile::tempdir().unwrap();
        for name in PRESETS {
            let p = Preset::builtin(name).unwrap();
            p.validate().unwrap();
            let path = tmp.path().join(format!("{name}.json"));
            std::fs::write(&path, serde_json::to_string_pretty(&p).unwrap()).unwrap();
            assert_eq!(Preset::load(path.to_str().unwrap()).unwrap(), p);
        }
        let official = Preset::builtin("imagenet").unwrap();
        assert_eq!((official.start.as_str(), official.epochs), ("resnet50", 60));
        assert!(official.duration_s >= 3600.0);
    }

    #[test]
    fn bad_files_name_the_file_and_the_field() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("bad.json");
        let mut p = Preset::builtin("fashion-mnist").unwrap();
        p.batch_size = (64, 8);
        std::fs::write(&path, serde_json::to_string(&p).unwrap()).unwrap();
        let e = Preset::load(path.to_str().unwrap()).unwrap_err();
        assert!(e.contains("bad.json") && e.contains("batch_size"), "{e}");
        std::fs::write(&path, "{\"name\": \"x\", \"colour\": 1}").unwrap();
        let e = Preset::load(path.to_str().unwrap()).unwrap_err();
        assert!(e.contains("bad.json"), "{e}");
        let e = Preset::load("no-such-preset").unwrap_err();
        assert!(
            e.contains("fashion-mnist") && e.contains("no-such-preset"),
            "{e}"
        );
    }
}
