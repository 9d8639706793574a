//! How the exchange is configured: the method, the buckets' sizes, where the buffer lies and
//! whether it overlaps with backward (recorded in the run's configuration), and the one set
//! of flags (`ExchangeArgs`) that `run`, `dp-check` and `comm-bench` share, built into an
//! [`ExchangeConfig`] in one place.

use serde::{Deserialize, Serialize};

use super::staging::Staging;

/// The exchange's collective.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExchangeMethod {
    /// The default: `hierarchical` where it measures faster on the run's groups at start-up,
    /// else `allreduce` ([`super::resolve_auto`]; resolved before anything is recorded or
    /// exchanged).
    Auto,
    /// Buckets reduced in place by blocking `MPI_Allreduce`, each as soon as it is filled
    /// (the flat exchange).
    Allreduce,
    /// Node-aware, per bucket as it is filled: each node's share i of the bucket summed onto
    /// its rank i over shared memory, all-reduced across the nodes among the ranks i, gathered
    /// back inside the node (with unequal nodes: onto the first ranks and broadcast back;
    /// `src/exchange/node_aware.rs`).
    Hierarchical,
}

impl ExchangeMethod {
    /// The name as the flag and the records spell it.
    pub fn name(self) -> &'static str {
        match self {
            ExchangeMethod::Auto => "auto",
            ExchangeMethod::Allreduce => "allreduce",
            ExchangeMethod::Hierarchical => "hierarchical",
        }
    }
}

/// Methods earlier versions offered and recorded, no longer built: each measured slower than
/// `allreduce` wherever ranks had a core each (docs/design.md, "Retired methods").
const RETIRED: [&str; 2] = ["allreduce-pipelined", "reduce-bcast"];

impl<'de> Deserialize<'de> for ExchangeMethod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use clap::ValueEnum;
        let name = String::deserialize(d)?;
        let all = ExchangeMethod::value_variants();
        if let Some(m) = all.iter().find(|m| m.name() == name) {
            return Ok(*m);
        }
        let names: Vec<&str> = all.iter().map(|m| m.name()).collect();
        let names = names.join(", ");
        let message = if RETIRED.contains(&name.as_str()) {
            format!(
                "exchange method `{name}` was retired in this version of aiperf (it measured \
                 slower than `allreduce`); write one of {names} instead, or resume a run \
                 recorded with it using the aiperf version that started it"
            )
        } else {
            format!("unknown exchange method `{name}`: expected one of {names}")
        };
        Err(serde::de::Error::custom(message))
    }
}

/// DDP's default bucket cap, 25 MiB (`bucket_cap_mb=25`).
pub const DEFAULT_BUCKET_BYTES: u64 = 25 << 20;
/// DDP's first bucket, 1 MiB: the first reduction starts early.
pub const DEFAULT_FIRST_BUCKET_BYTES: u64 = 1 << 20;
/// The smallest and largest bucket, bytes (`--bucket-bytes`, `train.exchange.bucket_bytes`;
/// also the range of `first_bucket_bytes`).
pub const BUCKET_BYTES: (u64, u64) = (4, 1 << 34);

/// How the exchange is carried out (recorded in the run's configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeConfig {
    /// The collective.
    pub method: ExchangeMethod,
    /// A bucket is closed once it holds at least this many bytes.
    pub bucket_bytes: u64,
    /// The same for the first bucket.
    pub first_bucket_bytes: u64,
    /// Where the buffer is (`--exchange-staging`; absent from older records: `auto`).
    #[serde(default)]
    pub staging: Staging,
    /// Whether buckets are reduced during backward, as they become ready
    /// ([`super::Progress`]; `--no-overlap` turns it off; absent from older records, which
    /// did not overlap: off).
    #[serde(default)]
    pub overlap: bool,
}

impl Default for ExchangeConfig {
    fn default() -> Self {
        ExchangeConfig {
            method: ExchangeMethod::Auto,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            first_bucket_bytes: DEFAULT_FIRST_BUCKET_BYTES,
            staging: Staging::Auto,
            overlap: true,
        }
    }
}

impl ExchangeConfig {
    /// `self` as MPI's thread level `provided` allows it: the overlap with backward needs at
    /// least `MPI_THREAD_SERIALIZED` (its communication thread calls MPI while the step's
    /// thread does not); below that the buckets go after backward. Each command settles
    /// this once, after `MPI_Init_thread`, before anything is recorded or exchanged.
    pub fn within(mut self, provided: mpi::Threading) -> ExchangeConfig {
        self.overlap &= provided >= mpi::Threading::Serialized;
        self
    }
}

/// The exchange's flags, the same in `aiperf run`, `dp-check` and `comm-bench` (flattened
/// into each). Every value is optional, so that a flag the user gave can be told from a
/// default ([`ExchangeArgs::apply`] lays them over a preset's or the default configuration).
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct ExchangeArgs {
    /// The gradient exchange (docs/scaling.md, "Data-parallel exchange and dp-check"): auto
    /// (hierarchical where it measures faster on the groups at start-up, else allreduce;
    /// the log says which and why, the records which), allreduce or hierarchical
    /// [default: auto].
    #[arg(long, value_enum)]
    pub exchange: Option<ExchangeMethod>,
    /// Bytes per exchange bucket (the first bucket 1 MiB, or less if this is less)
    /// [default: 26214400, DDP's 25 MiB].
    #[arg(long, value_name = "BYTES")]
    pub bucket_bytes: Option<u64>,
    /// Where the exchange's buffer is: host (gradients copied through a host buffer, pinned
    /// for CUDA tensors), device (gradients as views of one tensor handed to MPI as it is:
    /// CUDA needs a CUDA-aware MPI), or auto (device when the MPI says it is CUDA-aware; on
    /// the CPU the gradients are views all the same; `host` there copies them through a
    /// buffer, a diagnostic for before/after studies) [default: auto].
    #[arg(long, value_enum)]
    pub exchange_staging: Option<Staging>,
    /// Reduce the buckets after backward instead of during it (a diagnostic for before/after
    /// studies: the exchange overlaps with backward by default).
    #[arg(long)]
    pub no_overlap: bool,
}

impl ExchangeArgs {
    /// Lays the flags given over `cfg`: a bucket size sets the first bucket's to the smaller
    /// of it and DDP's 1 MiB. An error names the flag and its range.
    pub fn apply(&self, cfg: &mut ExchangeConfig) -> Result<(), FlagError> {
        if let Some(m) = self.exchange {
            cfg.method = m;
        }
        if let Some(s) = self.exchange_staging {
            cfg.staging = s;
        }
        if self.no_overlap {
            cfg.overlap = false;
        }
        if let Some(b) = self.bucket_bytes {
            let (lo, hi) = BUCKET_BYTES;
            if !(lo..=hi).contains(&b) {
                return Err(FlagError {
                    flag: "--bucket-bytes",
                    message: format!("must be in {lo}..={hi}, got {b}"),
                });
            }
            cfg.bucket_bytes = b;
            cfg.first_bucket_bytes = b.min(DEFAULT_FIRST_BUCKET_BYTES);
        }
        Ok(())
    }

    /// The flags over the default configuration.
    pub fn config(&self) -> Result<ExchangeConfig, FlagError> {
        let mut cfg = ExchangeConfig::default();
        self.apply(&mut cfg)?;
        Ok(cfg)
    }

    /// The flags given, as typed, in their declared order.
    pub fn given(&self) -> Vec<&'static str> {
        [
            ("--exchange", self.exchange.is_some()),
            ("--bucket-bytes", self.bucket_bytes.is_some()),
            ("--exchange-staging", self.exchange_staging.is_some()),
            ("--no-overlap", self.no_overlap),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    /// The first flag given other than `--bucket-bytes` (`comm-bench` times every method
    /// after backward from host memory, so only the bucket size applies there).
    pub fn beyond_buckets(&self) -> Option<&'static str> {
        self.given().into_iter().find(|f| *f != "--bucket-bytes")
    }
}

/// An exchange flag out of its range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct FlagError {
    /// The flag as typed.
    pub flag: &'static str,
    /// What is wrong and the range allowed.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_spelt_as_the_flag_and_the_records_spell_them() {
        use clap::ValueEnum;
        for m in ExchangeMethod::value_variants() {
            let flag = m.to_possible_value().unwrap();
            assert_eq!(m.name(), flag.get_name());
            let text = serde_json::to_string(m).unwrap();
            assert_eq!(text, format!("\"{}\"", m.name()));
            assert_eq!(serde_json::from_str::<ExchangeMethod>(&text).unwrap(), *m);
        }
    }

    #[test]
    fn the_flags_lay_over_a_configuration_with_the_first_bucket_rule() {
        let mut cfg = ExchangeConfig::default();
        ExchangeArgs::default().apply(&mut cfg).unwrap();
        assert_eq!(cfg, ExchangeConfig::default(), "no flag changes nothing");
        let args = ExchangeArgs {
            exchange: Some(ExchangeMethod::Hierarchical),
            bucket_bytes: Some(4096),
            exchange_staging: Some(Staging::Host),
            no_overlap: true,
        };
        let cfg = args.config().unwrap();
        assert_eq!(
            (cfg.method, cfg.bucket_bytes, cfg.first_bucket_bytes),
            (ExchangeMethod::Hierarchical, 4096, 4096)
        );
        assert_eq!((cfg.staging, cfg.overlap), (Staging::Host, false));
        let big = ExchangeArgs {
            bucket_bytes: Some(64 << 20),
            ..Default::default()
        };
        assert_eq!(
            big.config().unwrap().first_bucket_bytes,
            DEFAULT_FIRST_BUCKET_BYTES
        );
        let e = ExchangeArgs {
            bucket_bytes: Some(0),
            ..Default::default()
        }
        .config()
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("--bucket-bytes: must be in 4..="), "{e}");
        assert_eq!(args.beyond_buckets(), Some("--exchange"));
        assert_eq!(big.beyond_buckets(), None);
        assert_eq!(
            args.given(),
            [
                "--exchange",
                "--bucket-bytes",
                "--exchange-staging",
                "--no-overlap"
            ]
        );
        assert_eq!(big.given(), ["--bucket-bytes"]);
        let staged = ExchangeArgs {
            exchange_staging: Some(Staging::Device),
            ..big
        };
        assert_eq!(staged.beyond_buckets(), Some("--exchange-staging"));
    }

    #[test]
    fn the_overlap_needs_a_serialized_thread_level() {
        let cfg = ExchangeConfig::default();
        assert!(cfg.within(mpi::Threading::Serialized).overlap);
        assert!(cfg.within(mpi::Threading::Multiple).overlap);
        assert!(!cfg.within(mpi::Threading::Funneled).overlap);
        assert!(!cfg.within(mpi::Threading::Single).overlap);
        let off = ExchangeConfig {
            overlap: false,
            ..cfg
        };
        assert!(!off.within(mpi::Threading::Multiple).overlap);
    }

    #[test]
    fn a_retired_method_in_old_records_is_refused_by_name() {
        for old in RETIRED {
            let e = serde_json::from_str::<ExchangeMethod>(&format!("\"{old}\"")).unwrap_err();
            let e = e.to_string();
            assert!(e.contains(old) && e.contains("retired"), "{e}");
            assert!(e.contains("auto, allreduce, hierarchical"), "{e}");
        }
        let e = serde_json::from_str::<ExchangeMethod>("\"ring\"").unwrap_err();
        assert!(
            e.to_string().contains("unknown exchange method `ring`"),
            "{e}"
        );
    }
}
