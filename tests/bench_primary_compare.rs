//! `scripts/bench/primary_run_vs_bench.py`, bench-primary's check of a simulated run's
//! primary against the bench at the run's scale: the run's figures read from the cost line
//! the primary prints, the bench's combined over its bands by trials, and their ratios.

use std::path::Path;
use std::process::Command;

use aiperf::roles::primary::served::{Served, Spent};

const SCRIPT: &str = "scripts/bench/primary_run_vs_bench.py";

/// A log ending as a run's: its cost line written by the primary's own `Served`, for 2
/// trials of 2 duplicates, 2 Progress requests each, Result replies of 0.8 and 1 MB.
fn log() -> String {
    let mut s = Served::default();
    let mut add = |kind: usize, us: f64, reply_bytes: usize| {
        let cpu_s = us * 1e-6;
        let spent = Spent {
            wall_s: cpu_s,
            decode_cpu_s: 12.5e-6,
            cpu_s,
            reply_bytes,
        };
        s.add(kind, spent);
    };
    for (kind, us, n, bytes) in [
        (0, 10.0, 2, 0),
        (1, 200.0, 2, 16),
        (2, 1500.0, 2, 5000),
        (3, 200.0, 2, 16),
        (4, 50.0, 4, 0),
    ] {
        (0..n).for_each(|_| add(kind, us, bytes));
    }
    add(5, 4000.0, 800_000);
    add(5, 4000.0, 1_000_000);
    format!(
        "[INFO] status: 00:00:10 elapsed, 2 trials finished (0 running), 4 epochs\n[INFO] {}\n[INFO] {}\n",
        s.served_line(2, 10.0, 0.1),
        s.cost_line(2)
    )
}

/// One repetition of the bench with `caches`: two bands, 1 trial then 3, at the first
/// band's costs times `scale` (the second band's also times `scale`).
fn repetition(caches: &str, scale: f64) -> String {
    let row = |from: u32, to: u32, trials: u32, reply: u64| {
        serde_json::json!({
            "what": "primary", "groups": 2, "caches": caches, "history_from": from,
            "history_to": to, "trials": trials,
            "register_us": 9e9, "suggest_us": 9e9, "progress_us": 9e9, "result_us": 9e9,
            "register_cpu_us": 100.0 * scale, "suggest_cpu_us": 100.0 * scale,
            "progress_cpu_us": 25.0 * scale, "result_cpu_us": 2000.0 * scale,
            "trial_cpu_s": 0.00225 * scale, "result_reply_bytes": reply,
            "largest_reply_bytes": reply, "band_cpu_s": 1.0,
        })
        .to_string()
    };
    format!("{}\n{}\n", row(0, 1, 1, 300_000), row(1, 4, 3, 500_000))
}

/// The bench warm at 1x and 1.5x, cold at 2.5x: the run (2x) lies between.
fn bench_rows() -> String {
    [("hot", 1.0), ("cold", 2.5), ("hot", 1.5)]
        .map(|(c, s)| repetition(c, s))
        .concat()
}

fn run(log: &str, bench: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let (l, b) = (dir.path().join("log"), dir.path().join("bench.jsonl"));
    std::fs::write(&l, log).unwrap();
    std::fs::write(&b, bench).unwrap();
    script(&[l.as_os_str(), b.as_os_str()])
}

fn script(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(SCRIPT))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_bench_is_sized_from_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let l = dir.path().join("log");
    std::fs::write(&l, log()).unwrap();
    let out = script(&["--scale".as_ref(), l.as_os_str()]);
    // History 2; 4 Progress requests over 2 Results.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 2\n");
    std::fs::write(&l, "[INFO] primary: served 3 requests\n").unwrap();
    let out = script(&["--scale".as_ref(), l.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
}

fn last_json(out: &std::process::Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

#[test]
fn the_run_is_held_to_the_bench_range_from_warm_to_cold() {
    let out = run(&log(), &bench_rows());
    let v = last_json(&out);
    // The run's figures are read back from its cost line.
    assert_eq!(v["run"]["result_cpu_us"], 4000.0);
    assert_eq!(v["run"]["progress_requests"], 4);
    assert_eq!(v["run"]["duplicate_requests"], 2);
    assert_eq!(v["run"]["decode_us"], 12.5);
    assert_eq!(v["run"]["history"], 2);
    // The bench's CPU figures (not its wall figures), each repetition's bands weighted by
    // trials; least, median and most over the repetitions of each cache state.
    let f = &v["figures"];
    assert_eq!(
        f["result_cpu_us"]["warm"],
        serde_json::json!([2000.0, 3000.0, 3000.0])
    );
    assert_eq!(
        f["result_cpu_us"]["cold"],
        serde_json::json!([5000.0, 5000.0, 5000.0])
    );
    // 0.25 x 300 kB + 0.75 x 500 kB.
    assert_eq!(f["reply_bytes"]["warm"][0], 450_000.0);
    // The run's mix priced at the bench's warm costs: (2x100 + 2x100 + 4x25 + 2x2000) / 2
    // us; the run's own trial leaves its duplicates out (the bench's groups make none).
    assert_eq!(f["trial_ms"]["warm"][0], 2.25);
    assert_eq!(f["trial_ms"]["run"], 4.5);
    // Twice the warm bench, under the cold one: every figure agrees; the reply (2x the
    // bench's) does not.
    for kind in ["register", "suggest", "progress", "result"] {
        assert_eq!(v["agrees"][format!("{kind}_cpu_us")], true, "{kind}");
    }
    assert_eq!(v["agrees"]["trial_ms"], true);
    assert_eq!(v["agrees"]["reply_bytes"], false);
    assert_eq!(v["all_agree"], false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("2 duplicates at 1500 us (1.50 ms per trial)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the run DISAGREES with the bench: reply_bytes"),
        "{stdout}"
    );
}

#[test]
fn a_run_outside_the_range_disagrees_and_says_which_way() {
    // The bench warm only: the run's 2x is above its most.
    let out = run(&log(), &repetition("hot", 1.0).repeat(2));
    let v = last_json(&out);
    assert_eq!(v["agrees"]["result_cpu_us"], false);
    assert!(v["figures"]["result_cpu_us"]["cold"].is_null());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("above the most"), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no cold repetition (CACHES=cold)"));
    // Cold costs only, above the run: below the least.
    let out = run(&log(), &repetition("cold", 3.0));
    let v = last_json(&out);
    assert_eq!(v["agrees"]["suggest_cpu_us"], false);
    assert!(String::from_utf8_lossy(&out.stdout).contains("below the least"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no warm repetition (CACHES=hot)"));
    // A bench whose replies are the largest agrees on bytes.
    let out = run(
        &log(),
        &repetition("cold", 1.0).replace("500000", "2000000"),
    );
    assert_eq!(last_json(&out)["agrees"]["reply_bytes"], true);
}

#[test]
fn a_log_without_the_cost_line_is_named() {
    let out = run("[INFO] primary: served 3 requests\n", &bench_rows());
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no 'primary: CPU per request' line"), "{err}");
    let out = run(&log(), "");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no primary bench rows"));
}
