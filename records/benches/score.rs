//! Scoring speed (run by `scripts/bench/bench-score`, not a test): read and score a run of 100,000
//! epoch rows over 8 groups; the target is under 1 s. Prints the median of 5 runs.

use std::time::Instant;

use aiperf_records::schema::EpochRow;
use aiperf_records::writer::{GroupWriter, PrimaryWriter, RunMeta};
use aiperf_records::{read_run, score};

fn main() {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let (groups, per_group) = (8u32, 12_500u64);
    let t0 = 1.8e9;
    let world = 1 + 8 * groups;
    let meta = RunMeta {
        platform: Vec::new(),
        ceilings: Vec::new(),
        program_version: "bench".into(),
        config_json: "{}".into(),
        start_time_s: t0,
        world_size: world,
        groups,
        accelerators: 8 * groups,
        // One entry per rank, as `aiperf run` records them (the reader checks it).
        hosts: vec!["node".into(); world as usize],
        devices: vec!["cuda:0".into(); world as usize],
        seed: 0,
        dataset: "imagenet".into(),
        start_architecture: "resnet50".into(),
        precision: "bf16".into(),
        dataset_json: "{}".into(),
        search_json: "{}".into(),
    };
    let p = PrimaryWriter::create(
        &aiperf_records::folder::held_by(tmp.path(), "aiperf score bench").expect("claim"),
        &meta,
    )
    .expect("primary");
    for g in 0..groups {
        let rows: Vec<EpochRow> = (0..per_group)
            .map(|i| EpochRow {
                time_s: t0 + 1.0 + (i * 8 + u64::from(g)) as f64 * 0.3,
                trial: i / 20,
                model_id: i / 20,
                epoch: (i % 20) as u32 + 1,
                train_images: 1_281_167,
                steps: 5_005,
                val_images: 50_000,
                train_ops: 29_000_000_000_000_000 + i,
                val_ops: 390_000_000_000_000,
                train_loss: 2.0,
                val_loss: 2.1,
                val_accuracy: (i as f64 / per_group as f64) * 0.8,
                compute_s: 0.25,
                allreduce_s: 0.03,
                allreduce_bytes: 102_000_000,
                data_wait_s: 0.01,
                digest: [0; 32],
            })
            .collect();
        GroupWriter::create(
            &aiperf_records::folder::held_by(tmp.path(), "aiperf score bench").expect("claim"),
            g,
            8,
        )
        .expect("group")
        .append_epochs(&rows)
        .expect("rows");
    }
    p.finish(t0 + 30_001.0, &[]).expect("finish");
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let run = read_run(tmp.path()).expect("read");
            let s = score(&run, 360.0).expect("score");
            assert_eq!(s.epochs, 100_000);
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "read + score 100,000 epoch rows (8 groups, 84 grid points): median {:.3} s of 5",
        times[2]
    );
}
