//! Which precisions a device computes natively (docs/design.md §7): fp32 everywhere; bf16 on
//! processors whose kernels have bfloat16 instructions (AMX or AVX-512-BF16 on x86, the BF16
//! extension on Arm) unless a pin holds oneDNN below them; on GPUs by compute capability
//! (fp16 from 7.0, bf16 from 8.0: [`natives_for`]). A run refuses a precision
//! its device would only emulate; native is not the same as fast (bf16 on AVX-512-BF16
//! without AMX is slower than fp32), so `auto` is measured among the native ones by the
//! start-up probe, never ranked here. `AIPERF_NATIVE_BF16=0|1` forces the processor's
//! answer (tests force both sides of the check; a forced answer is in the recorded
//! fingerprint's pins).

use aiperf_records::platform::Fingerprint;
use tch::Device;

use super::Precision;

/// The environment variable that forces whether the processor counts as computing bf16
/// natively (`0` or `1`).
pub const FORCE_BF16: &str = "AIPERF_NATIVE_BF16";

/// The switches that force a platform fact (`AIPERF_NATIVE_BF16`, `AIPERF_GPU_NODE`) hold
/// `0` or `1` where set: any other value is an error naming it, whichever precision the
/// run asks for (`auto` would otherwise quietly read it as "not native").
pub fn check_switches() -> Result<(), String> {
    for name in [FORCE_BF16, crate::gpu::FORCE_GPU_NODE] {
        match std::env::var(name) {
            Ok(v) if v != "0" && v != "1" => return Err(not_a_switch(name, &v)),
            _ => {}
        }
    }
    Ok(())
}

/// The error for a switch `name` set to `value`, which is neither `0` nor `1`.
fn not_a_switch(name: &str, value: &str) -> String {
    format!("{name}={value} is neither 0 nor 1: unset it, or set 0 or 1")
}

/// oneDNN's instruction sets from which bfloat16 is computed natively (its names, as
/// `ONEDNN_MAX_CPU_ISA` takes them); a pin below these makes bf16 emulated.
const BF16_ISAS: &[&str] = &[
    "avx512_core_bf16",
    "avx10_1_512",
    "avx512_core_fp16",
    "avx10_1_512_amx",
    "avx512_core_amx",
    "avx10_1_512_amx_fp16",
    "avx512_core_amx_fp16",
    "all",
];

/// Whether this processor computes bf16 natively: `Ok` with the instructions it uses, or
/// `Err` naming what is missing.
pub fn cpu_bf16(fp: &Fingerprint) -> Result<String, String> {
    if let Some(v) = fp.pins.get(FORCE_BF16) {
        return match v.as_str() {
            "1" => Ok(format!("forced by {FORCE_BF16}=1")),
            "0" => Err(format!("forced off by {FORCE_BF16}=0")),
            other => Err(not_a_switch(FORCE_BF16, other)),
        };
    }
    let has = |f: &str| fp.cpu_features.iter().any(|x| x == f);
    let hardware = if has("amx_bf16") {
        "AMX"
    } else if has("avx512_bf16") {
        "AVX-512-BF16"
    } else if has("bf16") && has("asimd") {
        "the Arm BF16 extension"
    } else {
        return Err(format!(
            "the processor ({}) has neither AMX nor AVX-512-BF16",
            fp.cpu_model
        ));
    };
    let pinned = fp
        .pins
        .get("ONEDNN_MAX_CPU_ISA")
        .or(fp.pins.get("DNNL_MAX_CPU_ISA"));
    if let Some(p) = pinned {
        if !has("asimd") && !BF16_ISAS.contains(&p.to_lowercase().as_str()) {
            return Err(format!(
                "oneDNN is held to {p} by its ISA pin, below the processor's {hardware}"
            ));
        }
    }
    Ok(hardware.into())
}

/// The precisions a device of capability `cap` computes natively (fp32 last). From NVIDIA's
/// CUDA Programming Guide (appendix "Compute Capabilities") and the PTX ISA's `mma`
/// instruction: tensor cores multiply fp16 from compute capability 7.0 (Volta) and bf16 from
/// 8.0 (Ampere). Below 7.0 (Pascal's P100 and older) and for bf16 below 8.0 (V100, T4),
/// libtorch runs the reduced type on the ordinary cores or converts it, which buys nothing
/// a benchmark should choose, so only fp32 counts.
pub fn natives_for(cap: crate::gpu::Capability) -> Vec<Precision> {
    let at_least = |major, minor| cap >= crate::gpu::Capability { major, minor };
    let mut v = Vec::new();
    if at_least(8, 0) {
        v.push(Precision::Bf16);
    }
    if at_least(7, 0) {
        v.push(Precision::Fp16);
    }
    v.push(Precision::Fp32);
    v
}

/// The precisions `device` computes natively (`fp32` always, and last). A GPU whose compute
/// capability cannot be read counts as fp32 only, with a warning naming why.
pub fn natives(device: Device, fp: &Fingerprint) -> Vec<Precision> {
    if let Device::Cuda(i) = device {
        return match crate::gpu::capability(i) {
            Ok(cap) => natives_for(cap),
            Err(e) => {
                log::warn!(
                    "cuda:{i}: compute capability unknown ({e}); only fp32 counts as native"
                );
                vec![Precision::Fp32]
            }
        };
    }
    match cpu_bf16(fp) {
        Ok(_) => vec![Precision::Bf16, Precision::Fp32],
        Err(_) => vec![Precision::Fp32],
    }
}

/// `precision` checked for `device`: itself when `device` computes it natively, else an
/// error naming the missing feature; `auto` is an error (the start-up probe measures it).
pub fn resolve(
    precision: Precision,
    device: Device,
    fp: &Fingerprint,
) -> Result<Precision, String> {
    let native = natives(device, fp);
    match precision {
        Precision::Auto => {
            Err("--precision auto is resolved by the start-up probe, not by a table".into())
        }
        p if native.contains(&p) => Ok(p),
        Precision::Fp16 => Err(
            "--precision fp16 needs a CUDA device (CPU autocast is bf16 only): use bf16 or fp32 on a processor"
                .into(),
        ),
        p => Err(format!(
            "--precision {} is not native here: {} (bf16 would be emulated, slower than fp32); use --precision fp32 or auto",
            p.name(),
            cpu_bf16(fp).err().unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn cpu(features: &[&str], pins: &[(&str, &str)]) -> Fingerprint {
        let mut fp = crate::fingerprint::this_rank(1);
        fp.cpu_model = "Test CPU".into();
        fp.cpu_features = features.iter().map(|s| s.to_string()).collect();
        fp.pins = pins
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>();
        fp
    }

    #[test]
    fn bf16_is_native_with_amx_or_avx512_bf16_unless_pinned_below() {
        let amx = cpu(&["avx512f", "amx_tile", "amx_bf16"], &[]);
        assert_eq!(cpu_bf16(&amx).unwrap(), "AMX");
        assert_eq!(
            natives(Device::Cpu, &amx),
            [Precision::Bf16, Precision::Fp32]
        );
        assert!(resolve(Precision::Auto, Device::Cpu, &amx).is_err());
        let avx512 = cpu(&["avx512f", "avx512_bf16"], &[]);
        assert_eq!(cpu_bf16(&avx512).unwrap(), "AVX-512-BF16");
        let avx2 = cpu(&["avx2", "fma"], &[]);
        assert_eq!(natives(Device::Cpu, &avx2), [Precision::Fp32]);
        let e = resolve(Precision::Bf16, Device::Cpu, &avx2).unwrap_err();
        assert!(
            e.contains("neither AMX nor AVX-512-BF16") && e.contains("Test CPU"),
            "{e}"
        );
        // A pin below bf16 makes it emulated; one at or above keeps it native.
        let held = cpu(&["amx_tile", "amx_bf16"], &[("ONEDNN_MAX_CPU_ISA", "AVX2")]);
        let e = resolve(Precision::Bf16, Device::Cpu, &held).unwrap_err();
        assert!(e.contains("held to AVX2"), "{e}");
        let at = cpu(&["amx_bf16"], &[("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")]);
        assert!(cpu_bf16(&at).is_ok());
        assert!(resolve(Precision::Fp16, Device::Cpu, &amx).is_err());
        assert_eq!(
            resolve(Precision::Fp32, Device::Cpu, &avx2),
            Ok(Precision::Fp32)
        );
    }

    fn cap(major: u32, minor: u32) -> crate::gpu::Capability {
        crate::gpu::Capability { major, minor }
    }

    #[test]
    fn every_capability_class_gets_its_native_precisions() {
        use Precision::{Bf16, Fp16, Fp32};
        // Pascal (P100 6.0, P40 6.1) and older: fp32 only.
        for c in [cap(3, 7), cap(5, 2), cap(6, 0), cap(6, 1)] {
            assert_eq!(natives_for(c), [Fp32], "{c}");
        }
        // Volta (V100 7.0), Turing (T4 7.5): fp16 tensor cores, no bf16.
        for c in [cap(7, 0), cap(7, 2), cap(7, 5)] {
            assert_eq!(natives_for(c), [Fp16, Fp32], "{c}");
        }
        // Ampere (A100 8.0, A10 8.6), Ada (8.9), Hopper (9.0), Blackwell (10.0, 12.0).
        for c in [
            cap(8, 0),
            cap(8, 6),
            cap(8, 9),
            cap(9, 0),
            cap(10, 0),
            cap(12, 0),
        ] {
            assert_eq!(natives_for(c), [Bf16, Fp16, Fp32], "{c}");
        }
        assert_eq!(cap(7, 5).to_string(), "7.5");
    }

    #[test]
    fn the_override_forces_both_sides() {
        let forced_on = cpu(&["avx2"], &[(FORCE_BF16, "1")]);
        assert_eq!(
            resolve(Precision::Bf16, Device::Cpu, &forced_on),
            Ok(Precision::Bf16)
        );
        let forced_off = cpu(&["amx_bf16"], &[(FORCE_BF16, "0")]);
        let e = resolve(Precision::Bf16, Device::Cpu, &forced_off).unwrap_err();
        assert!(e.contains("forced off by AIPERF_NATIVE_BF16=0"), "{e}");
        assert!(cpu_bf16(&cpu(&[], &[(FORCE_BF16, "yes")]))
            .unwrap_err()
            .contains("neither 0 nor 1"));
        assert_eq!(natives(Device::Cpu, &forced_off), [Precision::Fp32]);
        assert_eq!(
            natives(Device::Cpu, &forced_on),
            [Precision::Bf16, Precision::Fp32]
        );
    }
}
