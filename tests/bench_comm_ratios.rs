//! `scripts/bench_comm_ratios.py`, bench-comm's tables (issue 24): the exchange against the
//! best raw call both as a ratio of the rounds' medians and paired operation by operation
//! over every round, from comm-bench records written here with known times.

mod common;

/// What comm-bench times, as its records name the methods.
const METHODS: &str =
    "allreduce allreduce-in-place exchange exchange-copy exchange-pipelined hierarchical reduce+bcast control";

/// One comm-bench row of 2 ranks whose operations took `times` seconds, as comm-bench
/// writes it (the bandwidths from the median time); `with_times` false writes a record
/// from before the operations' times were kept.
fn row(method: &str, bytes: u64, times: &[f64], with_times: bool) -> String {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let algbw = bytes as f64 / median;
    let mut r = serde_json::json!({
        "method": method, "ranks": 2, "scope": "world", "bytes": bytes,
        "seconds": median, "mean_seconds": median, "algbw": algbw, "busbw": algbw,
    });
    if with_times {
        r["times"] = serde_json::json!(times);
        r["paired"] = serde_json::json!(1.0);
    }
    r.to_string()
}

/// A round: at 64 KiB the in-place call takes `in_place` s per operation and the exchange
/// `exchange`, the out-of-place call twice the in-place one; at 128 KiB the out-of-place
/// call is the faster raw call (1 s against 2) and the exchange takes 1 s.
fn round(in_place: f64, exchange: f64, with_times: bool) -> String {
    let mut lines = Vec::new();
    for m in METHODS.split(' ') {
        let t = match m {
            "allreduce" => 2.0 * in_place,
            "exchange" => exchange,
            _ => in_place,
        };
        lines.push(row(m, 65536, &[t; 3], with_times));
        let t = if m == "allreduce-in-place" { 2.0 } else { 1.0 };
        lines.push(row(m, 131072, &[t; 3], with_times));
    }
    lines.join("\n") + "\n"
}

fn ratios(args: &[&str]) -> String {
    common::python_script("bench_comm_ratios.py", args)
}

fn line_of<'t>(text: &'t str, bytes: &str) -> &'t str {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(bytes))
        .unwrap_or_else(|| panic!("no row for {bytes}: {text}"))
}

#[test]
fn both_estimates_against_the_best_raw_call_pooled_over_rounds() {
    let dir = tempfile::tempdir().unwrap();
    // Round 1: the exchange at half the in-place call's speed; round 2, on a machine half
    // as fast, at its speed. Paired over both rounds' six operations: 0.5, 0.5, 0.5, 1, 1, 1.
    let r1 = dir.path().join("vc-test.r1.jsonl");
    let r2 = dir.path().join("vc-test.r2.jsonl");
    std::fs::write(&r1, round(1.0, 2.0, true)).unwrap();
    std::fs::write(&r2, round(2.0, 2.0, true)).unwrap();
    let text = ratios(&["sizes", r1.to_str().unwrap(), r2.to_str().unwrap()]);
    // Of medians: the exchange's bandwidth (2 s in both rounds) over the median of the
    // in-place call's bandwidths (of 1 s and of 2 s: as of 4/3 s): 0.67. Paired: the median
    // of the six pairs, 0.75.
    let small = line_of(&text, "65536");
    assert!(small.contains("in place"), "{small}");
    let cells: Vec<&str> = small.split("x |").collect();
    assert!(cells[0].ends_with("0.67"), "{small}");
    assert!(cells[1].trim_start().starts_with("0.75x"), "{small}");
    // The out-of-place call is the best raw call at 128 KiB, and the reference of both.
    let large = line_of(&text, "131072");
    assert!(large.contains(" out "), "{large}");
    assert!(large.contains("1.00x | 1.00x"), "{large}");
    assert!(
        text.contains("paired: 0.75-1.00x, >= 0.9x at 1 of 2 sizes"),
        "{text}"
    );

    let summary = ratios(&["summary", dir.path().to_str().unwrap()]);
    let test = summary
        .lines()
        .find(|l| l.starts_with("test "))
        .expect(&summary);
    assert!(
        test.contains("(0.75-1.00)") && test.contains(" 1/2 "),
        "{test}"
    );
}

#[test]
fn records_without_the_operations_times_have_no_paired_figure() {
    let dir = tempfile::tempdir().unwrap();
    let r1 = dir.path().join("old.jsonl");
    std::fs::write(&r1, round(1.0, 2.0, false)).unwrap();
    let text = ratios(&["sizes", r1.to_str().unwrap()]);
    let small = line_of(&text, "65536");
    assert!(small.contains("0.50x | -"), "{small}");
    assert!(!text.contains("paired:"), "{text}");
}
