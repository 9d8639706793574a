//! `aiperf doctor`'s account of the arithmetic on each rank (docs/design.md §7): the
//! precisions its device computes natively (and why bf16 is or is not one), and the
//! measured ceiling in each — what `aiperf run` would choose and divide by.

use aiperf_records::ceiling::Ceiling;
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;
use serde::Serialize;

use crate::platform::Platform;
use crate::train::{native, Precision};

/// The arithmetic one rank can do.
#[derive(Serialize)]
pub struct Arithmetic {
    /// The device measured (`cpu`, `cuda:N`: the node-local rank's GPU).
    pub device: String,
    /// A GPU's compute capability (`major.minor`), which decides its native precisions;
    /// `None` on a processor, or why it could not be read.
    pub compute_capability: Option<String>,
    /// The precisions it computes natively (what `--precision auto` measures among).
    pub native_precisions: Vec<&'static str>,
    /// Why bf16 is native on the processor (its instructions) or not (what is missing).
    pub cpu_bf16: String,
    /// Intra-op threads of the measurement: the node's cores shared by its ranks, as a run
    /// shares them.
    pub threads: usize,
    /// The measured ceiling in each native precision.
    pub ceilings: Vec<Ceiling>,
    /// A measurement that failed, by precision.
    pub errors: Vec<String>,
}

/// The doctor's JSON line: the platform's fields and the arithmetic's.
#[derive(Serialize)]
pub struct WithPlatform<'a> {
    #[serde(flatten)]
    platform: &'a Platform,
    #[serde(flatten)]
    arithmetic: &'a Arithmetic,
}

impl Arithmetic {
    /// Probes this rank on `choice` (collective over `world`: the node's ranks are
    /// counted); an error where `choice` asks for CUDA and libtorch sees none.
    pub fn probe(
        world: &SimpleCommunicator,
        choice: crate::platform::DeviceChoice,
    ) -> anyhow::Result<Self> {
        let node = world.split_shared(world.rank());
        let (local, on_node) = (node.rank().max(0) as usize, node.size().max(1) as usize);
        let threads = crate::world::bootstrap::default_threads(on_node);
        tch::set_num_threads(i32::try_from(threads).unwrap_or(1));
        let device = choice.resolve(local).map_err(anyhow::Error::msg)?;
        let compute_capability = match device {
            tch::Device::Cuda(i) => Some(match crate::gpu::capability(i) {
                Ok(c) => c.to_string(),
                Err(e) => format!("unknown ({e})"),
            }),
            _ => None,
        };
        let fp = crate::fingerprint::this_rank(threads);
        let natives = native::natives(device, &fp);
        let host = crate::world::bootstrap::host_name();
        let rank = u32::try_from(world.rank()).unwrap_or(0);
        let (mut ceilings, mut errors) = (Vec::new(), Vec::new());
        for &p in &natives {
            match crate::ceiling::measure(device, p, rank, &host) {
                Ok(c) => ceilings.push(c),
                Err(e) => errors.push(format!("{}: {e}", p.name())),
            }
        }
        Ok(Arithmetic {
            device: crate::host::device_label(device),
            compute_capability,
            native_precisions: natives.iter().map(|p| Precision::name(*p)).collect(),
            cpu_bf16: match native::cpu_bf16(&fp) {
                Ok(how) => format!("native ({how})"),
                Err(why) => format!("not native: {why}"),
            },
            threads,
            ceilings,
            errors,
        })
    }

    /// The JSON object of `platform` with these fields beside its own.
    pub fn with<'a>(&'a self, platform: &'a Platform) -> WithPlatform<'a> {
        WithPlatform {
            platform,
            arithmetic: self,
        }
    }

    /// One line for the table.
    pub fn line(&self) -> String {
        let ceilings: Vec<String> = self
            .ceilings
            .iter()
            .map(|c| {
                format!(
                    "{} matrix product {:.1} GOPS (n={}), 3×3 convolution {:.1} GOPS",
                    c.precision,
                    c.gemm_ops_per_s / 1e9,
                    c.gemm_n,
                    c.conv_ops_per_s / 1e9
                )
            })
            .chain(self.errors.iter().map(|e| format!("failed: {e}")))
            .collect();
        let cap = self
            .compute_capability
            .as_ref()
            .map_or(String::new(), |c| format!(" (compute capability {c})"));
        format!(
            "{}{cap} computes natively {} (bf16 on the processor: {}); ceiling with {} thread(s): {}",
            self.device,
            self.native_precisions.join(", "),
            self.cpu_bf16,
            self.threads,
            ceilings.join("; ")
        )
    }
}
