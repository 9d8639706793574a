//! `--trainer emulated` under a real `mpirun`: accelerators are waits, but every step
//! exchanges the architecture's real parameter count through the training's exchange, so
//! the records show the exchange's bytes and time; ranks agree bit for bit on every sum, and
//! the score says what was emulated (and INVALID, as the rules require).

use std::path::Path;
use std::process::Command;

use aiperf::arch::Graph;
use aiperf::ops::OpCount;
use aiperf_records::{read_run, score};

mod common;
use common::{mpirun, text};

/// An emulated run on `np` ranks into `dir` that ends once four epochs are recorded over its
/// groups (the deadline far beyond: the same work on a machine of any speed).
fn emulated(np: usize, dir: &Path, extra: &[&str]) -> String {
    let out = mpirun(np)
        .args(["run", "--trainer", "emulated", "--emulated-ops", "2e11"])
        .args([
            "--duration",
            "600",
            "--stop-after-epochs",
            "4",
            "--sim-train-images",
            "2048",
            "--sim-val-images",
            "256",
        ])
        .args(["--batch-size", "32:64", "--results"])
        .arg(dir)
        .args(extra)
        .output()
        .unwrap();
    let text = text(&out);
    assert!(out.status.success(), "np={np}: {text}");
    text
}

#[test]
fn emulated_groups_exchange_their_real_parameter_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    // Two groups of two ranks; small buckets so several go per step, through the node-aware
    // reducer (one node: onto the first rank and back).
    let log = emulated(
        5,
        &dir,
        &[
            "--group-size",
            "2",
            "--bucket-bytes",
            "65536",
            "--exchange",
            "hierarchical",
        ],
    );
    assert!(
        log.contains("exchanged sums bit-identical on all 2 ranks"),
        "{log}"
    );
    let run = read_run(&dir).unwrap();
    assert!(run.info.precision == "emulated", "{}", run.info.precision);
    let mut epochs = 0;
    for g in &run.groups {
        for e in &g.epochs {
            let graph = Graph::from_json(&run.architectures[&e.model_id]).unwrap();
            let params = OpCount::of(&graph).unwrap().params;
            // Every step: the gradient of every parameter and the stop flag, 4 bytes each.
            assert_eq!(
                e.allreduce_bytes,
                e.steps * (params + 1) * 4,
                "model {}",
                e.model_id
            );
            assert!(e.allreduce_s > 0.0 && e.compute_s > 0.0);
            epochs += 1;
        }
    }
    // The run ends once four epochs are recorded (one in flight may be recorded too).
    assert!(epochs >= 4, "{epochs} epochs");
    let s = score(&run, 2.0).unwrap();
    assert_eq!(s.integrity.records, "intact");
    assert!(s.allreduce_bytes_per_s.is_some());
    assert!(
        s.warnings
            .iter()
            .any(|w| w.starts_with("emulated trainer:")),
        "{:?}",
        s.warnings
    );
    assert!(s
        .verdict
        .reasons
        .iter()
        .any(|r| r.contains("\"emulated\", official \"real\"")));
}

#[test]
fn a_one_rank_group_after_backward_works_too() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    emulated(3, &dir, &["--group-size", "1", "--no-overlap"]);
    let run = read_run(&dir).unwrap();
    // Groups of one exchange nothing.
    assert!(run
        .groups
        .iter()
        .flat_map(|g| &g.epochs)
        .all(|e| e.allreduce_bytes == 0));
    assert!(score(&run, 2.0).unwrap().allreduce_bytes_per_s.is_none());
}

#[test]
fn traced_steps_export_as_a_chrome_trace_with_every_ranks_spans() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    emulated(
        5,
        &dir,
        &[
            "--group-size",
            "2",
            "--bucket-bytes",
            "65536",
            "--trace-steps",
            "3",
        ],
    );
    // The default exchange, `auto`, is resolved before the configuration is recorded: on one
    // node there is nothing to time, and the record names the flat exchange that ran.
    let info = read_run(&dir).unwrap().info;
    let config: serde_json::Value = serde_json::from_str(&info.config_json).unwrap();
    assert_eq!(
        config["preset"]["train"]["exchange"]["method"], "allreduce",
        "{config}"
    );
    let file = tmp.path().join("trace.json");
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .arg("score")
        .arg(&dir)
        .arg("--trace")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.code() == Some(4), // scored, INVALID (docs/reviewer.md, "Exit status")
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let run = read_run(&dir).unwrap();
    for g in &run.groups {
        let epochs = g.epochs.len();
        for rank in 0..2u64 {
            let mine: Vec<&serde_json::Value> = events
                .iter()
                .filter(|e| e["ph"] == "X" && e["pid"] == g.group && e["tid"] == rank)
                .collect();
            let count = |name: &str| mine.iter().filter(|e| e["cat"] == name).count();
            // Three steps of every recorded epoch (and of an abandoned last one, if any).
            assert!(
                count("forward+backward") >= 3 * epochs,
                "group {} rank {rank}",
                g.group
            );
            assert!(count("exchange") >= count("forward+backward"));
            assert!(mine.iter().all(|e| e["args"]["step"].as_u64().unwrap() < 3));
            assert!(mine.iter().all(|e| e["ts"].as_f64().unwrap() > -1e6));
            assert!(mine.iter().all(|e| e["dur"].as_f64().unwrap() >= 0.0));
            // The exchange overlaps backward: buckets' reductions start before
            // their step's forward+backward ends (asked of one step at least: a starved
            // communication thread on a busy machine may start late in some).
            let at = |e: &serde_json::Value, k: &str| e[k].as_f64().unwrap();
            let overlapped = mine
                .iter()
                .filter(|e| e["cat"] == "forward+backward")
                .filter(|compute| {
                    let end = at(compute, "ts") + at(compute, "dur");
                    mine.iter().any(|e| {
                        e["cat"] == "exchange"
                            && e["args"]["step"] == compute["args"]["step"]
                            && e["ts"].as_f64().unwrap() < end
                    })
                })
                .count();
            assert!(overlapped >= 1, "group {} rank {rank}: {mine:?}", g.group);
        }
        let named = events.iter().any(|e| {
            e["ph"] == "M"
                && e["pid"] == g.group
                && e["args"]["name"] == format!("group {}", g.group)
        });
        assert!(named);
    }
    // Without traced steps, --trace says how to get them.
    let plain = tmp.path().join("plain");
    emulated(3, &plain, &["--group-size", "2"]);
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .arg("score")
        .arg(&plain)
        .arg("--trace")
        .arg(tmp.path().join("none.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--trace-steps"),
        "{err}"
    );
}
