//! The virtual cluster's study scenario (6 of `main.rs`): the weak-scaling study as the job a
//! vendor submits, `sbatch mpi-launch/weak-scaling.sbatch`, on 1 and 2 of the nodes through
//! the virtual cluster's SLURM, with short runs: the table has a row per node count, each
//! count its repetitions, and every figure comes from the runs' records.

use std::path::Path;
use std::process::Command;

use super::{aiperf_env, root, run_for, slurm_up, text, vc};

/// Scenario 6: the study job on 1 and 2 nodes × 2 ranks, 2 repetitions of 6 s.
pub(super) fn weak_scaling_study_as_a_job(work: &Path) {
    let conf = slurm_up();
    let study = work.join("study");
    let out = run_for(
        900,
        aiperf_env(&mut Command::new("sbatch"))
            .env("SLURM_CONF", &conf)
            .current_dir(root())
            .args(["--wait", "--nodes=2", "--ntasks-per-node=3", "--cpus-per-task=1"])
            .args(["--gpus-per-node=0", "--overcommit", "--time=30"])
            .arg(format!("--output={}/job-%j.out", work.display()))
            .arg(format!(
                "--export=ALL,NODE_COUNTS=1 2,REPS=2,DURATION=6,RANKS_PER_NODE=2,CPU_BIND=none,TRACE_STEPS=2,IMAGES_PER_RANK=256,VAL_IMAGES_PER_RANK=32,STUDY={},AIPERF_ROOT={}",
                study.display(),
                root().display()
            ))
            .arg("mpi-launch/weak-scaling.sbatch"),
    );
    let job_out = std::fs::read_dir(work)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().ends_with(".out"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .unwrap_or_default();
    assert!(out.status.success(), "{}\n{job_out}", text(&out));
    // Every count has its repetitions, each a scored run with its trace.
    for r in 1..=2 {
        for n in [1, 2] {
            let run = study.join(format!("r{r}/n{n}"));
            assert!(
                run.join("primary.h5").is_file(),
                "{}: {job_out}",
                run.display()
            );
            assert!(study.join(format!("r{r}/n{n}.trace.json")).is_file());
        }
        assert!(
            study.join(format!("r{r}/report/scaling.svg")).is_file(),
            "{job_out}"
        );
    }
    // The table: a row per node count, with the repetitions it summarises.
    let table: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(study.join("table.json")).unwrap()).unwrap();
    let points = table["points"].as_array().unwrap();
    let nodes: Vec<u64> = points
        .iter()
        .map(|p| p["nodes"].as_u64().unwrap())
        .collect();
    assert_eq!(nodes, [1, 2], "{table}");
    for p in points {
        assert_eq!(p["repetitions"], 2, "{p}");
        let eff = p["step_efficiency"].as_f64().unwrap();
        assert!(eff.is_finite() && eff > 0.0, "{p}");
    }
    assert_eq!(
        points[0]["step_efficiency"].as_f64(),
        Some(1.0),
        "1 node is the reference"
    );
    // From the records: 1 node × 2 ranks is 2 accelerators, 2 nodes 4.
    let accelerators: Vec<u64> = points
        .iter()
        .map(|p| p["accelerators"].as_u64().unwrap())
        .collect();
    assert_eq!(accelerators, [2, 4], "{table}");
    assert!(std::fs::read_to_string(study.join("table.md"))
        .unwrap()
        .contains("| 2 |"));
    let down = run_for(60, Command::new(vc()).arg("slurm-down"));
    assert!(down.status.success(), "{}", text(&down));
}
