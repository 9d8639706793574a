//! Helpers shared by the record tests: a small two-group run written with the real writer,
//! the serial lock HDF5 needs, and the prerequisite check of `make test`.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::Path;

use aiperf_records::folder::{self, Claimed};
use aiperf_records::schema::{EpochRow, MonitorRow, TpeRow, TrialRow, TrialStatus};
use aiperf_records::writer::{GroupWriter, PrimaryWriter, RunMeta};

/// The run's start, Unix seconds.
/// `dir` held by the tests' job, as a run's writers need it (created and claimed if need be).
pub fn held(dir: impl AsRef<Path>) -> Claimed {
    folder::held_by(dir.as_ref(), "aiperf records test").expect("claim")
}

pub const T0: f64 = 1_800_000_000.0;

/// The tests take turns: with several threads opening and closing HDF5 files at once, this
/// HDF5 (1.10.8 through hdf5-metno 0.15) intermittently reports a just-closed file as locked
/// ("unable to lock file, errno = 11"). aiperf writes each record file from one thread, so
/// the tests serialise rather than race.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A missing prerequisite (a tool or a font): a failure naming the Debian package when
/// `AIPERF_REQUIRE_PREREQS=1` (as `make test` sets it), else a skip that says so. Returns
/// (when it returns) so that the caller can skip the rest of its checks.
pub fn missing_prerequisite(what: &str, debian_package: &str) {
    if std::env::var("AIPERF_REQUIRE_PREREQS").as_deref() == Ok("1") {
        panic!(
            "{what} not found, and AIPERF_REQUIRE_PREREQS=1 requires it: install the Debian package {debian_package}"
        );
    }
    eprintln!("SKIP: {what} not found (Debian: {debian_package}; AIPERF_REQUIRE_PREREQS=1 makes this a failure)");
}

/// The run's attributes for `groups` groups of two ranks (plus the primary): one host and
/// one device entry per rank, as `aiperf run` records them.
pub fn meta(groups: u32) -> RunMeta {
    let world = 1 + 2 * groups;
    RunMeta {
        platform: Vec::new(),
        // Each training rank's ceilings: 30 operations per second in bf16, 10 in fp32, the
        // run's precision (the machine's ceiling is the faster, whatever the run chose).
        ceilings: (1..world)
            .flat_map(|rank| [("bf16", 30.0), ("fp32", 10.0)].map(|(p, r)| (rank, p, r)))
            .map(|(rank, precision, rate)| aiperf_records::ceiling::Ceiling {
                rank,
                host: "node".into(),
                device: "cpu".into(),
                precision: precision.into(),
                threads: 1,
                gemm_n: 2048,
                gemm_ops_per_s: rate,
                conv: "3×3 convolution".into(),
                conv_ops_per_s: rate / 2.0,
                reps: 5,
            })
            .collect(),
        program_version: "test".into(),
        config_json: SMALL_CONFIG.into(),
        start_time_s: T0,
        world_size: world,
        groups,
        accelerators: 2 * groups,
        hosts: vec!["node0".into(); world as usize],
        devices: std::iter::once("primary".to_string())
            .chain((1..world).map(|_| "cpu (1 threads)".to_string()))
            .collect(),
        seed: 7,
        dataset: "fashion-mnist".into(),
        start_architecture: "resnet20".into(),
        precision: "fp32".into(),
        dataset_json: FASHION_MNIST.into(),
        search_json: OFFICIAL_SEARCH.into(),
    }
}

/// The recorded configuration keys the rules read, of a small run (`make run`'s preset with
/// the official grid step).
pub const SMALL_CONFIG: &str = r#"{"trainer":"real","preset":{"name":"fashion-mnist","start":"resnet8","duration_s":1000.0,"epochs":8,"kernel_sizes":[3,5,7],"score_interval_s":360.0,"train":{"precision":"fp32","train_images":20000,"val_images":10000}}}"#;
/// A Fashion-MNIST pack's identity, as `aiperf run` records it.
pub const FASHION_MNIST: &str = r#"{"name":"fashion-mnist","train_images":60000,"val_images":10000,"classes":10,"stored":[1,28,28],"input":[28,28,1],"subset":false,"crc32":[1,2]}"#;
/// ImageNet's identity, whole.
pub const IMAGENET: &str = r#"{"name":"imagenet","train_images":1281167,"val_images":50000,"classes":1000,"stored":[3,256,256],"input":[224,224,3],"subset":false,"crc32":[3,4]}"#;
/// The search record of this build with the official 60-epoch budget.
pub const OFFICIAL_SEARCH: &str = r#"{"architecture_search":{"name":"network-morphism-bo","version":3},"hpo":{"name":"tpe","version":2},"warmup_epochs":[15,30,45],"patience":[8,10,12,14,16,18,20,20],"tpe_from_round":4}"#;
/// The recorded configuration keys the rules read, official (`aiperf run --config imagenet`).
pub const OFFICIAL_CONFIG: &str = r#"{"trainer":"real","preset":{"name":"imagenet","start":"resnet50","duration_s":3700.0,"epochs":60,"kernel_sizes":[3,5,7],"score_interval_s":360.0,"train":{"precision":"bf16","train_images":null,"val_images":null}}}"#;

/// An official run's attributes (ImageNet, ResNet-50, bf16, real trainer).
/// Every rank on one host, a processor with AVX-512-BF16 (bf16 native), one thread.
pub fn platform(world: u32) -> Vec<aiperf_records::platform::PlatformEntry> {
    vec![aiperf_records::platform::PlatformEntry {
        ranks: (0..world).collect(),
        hosts: vec!["node".into()],
        fingerprint: aiperf_records::platform::Fingerprint {
            cpu_vendor: "GenuineIntel".into(),
            cpu_model: "Xeon".into(),
            cpu_features: ["avx2", "avx512f", "avx512_bf16"]
                .map(String::from)
                .to_vec(),
            threads: 1,
            ..Default::default()
        },
    }]
}

pub fn official_meta(groups: u32) -> RunMeta {
    RunMeta {
        dataset: "imagenet".into(),
        start_architecture: "resnet50".into(),
        precision: "bf16".into(),
        config_json: OFFICIAL_CONFIG.into(),
        dataset_json: IMAGENET.into(),
        ..meta(groups)
    }
}

/// An epoch completed `t` seconds after t0: 8 s compute, 1 s all-reduce of 1000 bytes, 1 s
/// data wait.
pub fn epoch(t: f64, train_ops: u64, val_ops: u64, acc: f64) -> EpochRow {
    EpochRow {
        time_s: T0 + t,
        trial: 0,
        model_id: 0,
        epoch: 1,
        train_images: 100,
        steps: 4,
        val_images: 10,
        train_ops,
        val_ops,
        train_loss: 1.0,
        val_loss: 1.0,
        val_accuracy: acc,
        compute_s: 8.0,
        allreduce_s: 1.0,
        allreduce_bytes: 1000,
        data_wait_s: 1.0,
        digest: [0; 32],
    }
}

/// A finished trial of group 0, model 0, from t0 to t0 + 720 s.
pub fn trial() -> TrialRow {
    TrialRow {
        model_id: 0,
        father: -1,
        group: 0,
        round: 0,
        batch_size: 32,
        kernel_size: 3,
        epochs: 3,
        best_accuracy: 0.6,
        reported_accuracy: 0.6,
        start_s: T0,
        end_s: T0 + 720.0,
        status: TrialStatus::Finished,
        digest: [0; 32],
    }
}

/// Two groups; group 1 records one epoch after the end.
pub fn write_run(dir: &Path, end: Option<f64>) {
    let p = PrimaryWriter::create(&held(dir), &meta(2)).unwrap();
    p.append_trial(&trial()).unwrap();
    p.append_architecture(0, "{\"nodes\": []}").unwrap();
    p.append_tpe(&TpeRow {
        time_s: T0 + 720.0,
        batch_size: 32,
        kernel_size: 3,
        loss: 0.4,
        digest: [0; 32],
    })
    .unwrap();
    let g0 = GroupWriter::create(&held(dir), 0, 2).unwrap();
    for e in [
        epoch(100.0, 1000, 100, 0.5),
        epoch(400.0, 2000, 200, 0.6),
        epoch(720.0, 3000, 300, 0.55),
    ] {
        g0.append_epoch(&e).unwrap();
    }
    g0.append_monitor(&MonitorRow {
        time_s: T0 + 30.0,
        accel_util: f64::NAN,
        accel_mem_bytes: f64::NAN,
        cpu_util: 0.9,
        host_mem_bytes: 1e9,
    })
    .unwrap();
    let g1 = GroupWriter::create(&held(dir), 1, 2).unwrap();
    for e in [
        epoch(350.0, 500, 50, 0.7),
        epoch(900.0, 4000, 400, 0.8),
        epoch(1100.0, 9999, 9, 0.99),
    ] {
        g1.append_epoch(&e).unwrap();
    }
    if let Some(end) = end {
        p.finish(T0 + end, &[g0.chain(), g1.chain()]).unwrap();
    }
}

/// Equal within a relative 1e-9.
pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

/// The per-accelerator batch size of [`official_run`] and [`small_run`].
pub const BATCH: u32 = 32;
/// Ranks per group of [`official_run`] and [`small_run`].
pub const RANKS: u32 = 2;

pub mod reseal;

/// What a consistent fixture trains: its attributes, start architecture, images per epoch
/// (training, validation) and duration.
struct Setting {
    meta: RunMeta,
    arch: aiperf_ir::arch::Graph,
    images: (u64, u64),
    duration_s: f64,
}

/// A one-group run of one trial of `epochs` epochs that is consistent in every respect
/// rules-4 checks: the configured images in global batches of 32 × 2, true op counts,
/// evenly spaced epochs ending at the deadline, a trial row that agrees, a TPE, monitor
/// and trace row, real devices, sealed at a clean stop. Returns the run digest.
fn consistent_run(dir: &Path, s: &Setting, epochs: u32) -> aiperf_records::digest::Digest {
    // Ceilings of real accelerators (teraoperations per second): the work fits under them.
    let mut meta = s.meta.clone();
    meta.platform = platform(1 + RANKS);
    for c in &mut meta.ceilings {
        c.gemm_ops_per_s *= 1e12;
        c.conv_ops_per_s *= 1e12;
    }
    let p = PrimaryWriter::create(&held(dir), &meta).unwrap();
    p.append_architecture(0, &s.arch.to_json()).unwrap();
    let count = aiperf_ir::ops::OpCount::of(&s.arch).unwrap();
    let g = GroupWriter::create(&held(dir), 0, RANKS).unwrap();
    let global = u64::from(BATCH * RANKS);
    let every = s.duration_s / f64::from(epochs);
    for k in 1..=epochs {
        let mut e = epoch(every * f64::from(k), 0, 0, 0.70 + 0.01 * f64::from(k));
        e.epoch = k;
        e.steps = s.images.0 / global;
        e.train_images = e.steps * global;
        e.val_images = s.images.1;
        e.train_ops = u64::try_from(count.train_epoch(e.train_images, e.steps)).unwrap();
        e.val_ops = u64::try_from(count.eval_epoch(e.val_images)).unwrap();
        if k == 1 {
            let steps: Vec<aiperf_records::schema::StepRow> = (0..e.steps.min(32) as u32)
                .map(|step| aiperf_records::schema::StepRow {
                    model_id: 0,
                    step,
                    train_loss: 2.3 - 0.01 * f64::from(step),
                    digest: [0; 32],
                })
                .collect();
            g.append_steps(&steps).unwrap();
        }
        g.append_epoch(&e).unwrap();
    }
    p.append_trial(&TrialRow {
        epochs,
        best_accuracy: 0.70 + 0.01 * f64::from(epochs),
        reported_accuracy: 0.70 + 0.01 * f64::from(epochs),
        end_s: T0 + s.duration_s,
        status: TrialStatus::Stopped,
        ..trial()
    })
    .unwrap();
    p.append_tpe(&TpeRow {
        time_s: T0 + s.duration_s,
        batch_size: BATCH,
        kernel_size: 3,
        loss: 0.27,
        digest: [0; 32],
    })
    .unwrap();
    g.append_monitor(&MonitorRow {
        time_s: T0 + 30.0,
        accel_util: f64::NAN,
        accel_mem_bytes: f64::NAN,
        cpu_util: 0.9,
        host_mem_bytes: 1e9,
    })
    .unwrap();
    g.append_trace(&[aiperf_records::schema::TraceRow {
        rank: 0,
        model_id: 0,
        epoch: 1,
        step: 0,
        kind: 1,
        bucket: 0,
        start_s: T0 + 40.0,
        end_s: T0 + 41.0,
    }])
    .unwrap();
    let chain = g.chain();
    drop(g);
    p.finish(T0 + s.duration_s, &[chain]).unwrap()
}

/// [`consistent_run`] under the official configuration: ResNet-50 on ImageNet's whole
/// splits, 3700 s.
pub fn official_run(dir: &Path, epochs: u32) -> aiperf_records::digest::Digest {
    let setting = Setting {
        meta: official_meta(1),
        arch: aiperf_ir::arch::resnet50(aiperf_ir::arch::Shape::new(3, 224, 224), 1000),
        images: (1_281_167, 50_000),
        duration_s: 3700.0,
    };
    consistent_run(dir, &setting, epochs)
}

/// [`consistent_run`] of `make run`'s kind: ResNet-8 on Fashion-MNIST, 20,000 and 10,000
/// images per epoch, 1000 s.
pub fn small_run(dir: &Path, epochs: u32) -> aiperf_records::digest::Digest {
    let setting = Setting {
        meta: RunMeta {
            start_architecture: "resnet8".into(),
            ..meta(1)
        },
        arch: aiperf_ir::arch::by_name("resnet8", aiperf_ir::arch::Shape::new(1, 28, 28), 10)
            .unwrap(),
        images: (20_000, 10_000),
        duration_s: 1000.0,
    };
    consistent_run(dir, &setting, epochs)
}

/// Rewrites the epochs of `group-0.h5` through HDF5, as an editor would.
pub fn edit_epochs(dir: &Path, edit: impl FnOnce(&mut Vec<EpochRow>)) {
    let f = hdf5::File::open_rw(dir.join("group-0.h5")).unwrap();
    let ds = f.dataset("epochs").unwrap();
    let mut rows: Vec<EpochRow> = ds.read_raw().unwrap();
    edit(&mut rows);
    ds.resize(rows.len()).unwrap();
    ds.write_raw(&rows).unwrap();
}

/// `aiperf-score ARGS`: (exit status, stdout + stderr).
pub fn aiperf_score(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aiperf-score"))
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text.into_owned())
}
