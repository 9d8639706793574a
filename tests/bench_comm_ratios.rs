//! `scripts/bench/bench_comm_ratios.py`, bench-comm's tables: the exchange against the
//! best raw call both as a ratio of the rounds' medians and paired operation by operation
//! over every round, from comm-bench records written here with known times.

mod common;

/// What comm-bench times, as its records name the methods.
const METHODS: &str = "allreduce allreduce-in-place exchange exchange-copy hierarchical control";

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

/// A round: at 64 KiB the in-place call's operations take `in_place` s and the exchange's
/// `exchange` (iteration by iteration), the out-of-place call's twice the in-place one's,
/// every other method's as the in-place call's; at 128 KiB the out-of-place call is the
/// faster raw call (1 s against 2) and the exchange takes 1 s. Methods in `leave_out` are
/// missing, as from a record made before they existed.
fn round(in_place: [f64; 3], exchange: [f64; 3], with_times: bool, leave_out: &[&str]) -> String {
    let mut lines = Vec::new();
    for m in METHODS.split(' ').filter(|m| !leave_out.contains(m)) {
        let t = match m {
            "allreduce" => in_place.map(|t| 2.0 * t),
            "exchange" => exchange,
            _ => in_place,
        };
        lines.push(row(m, 65536, &t, with_times));
        let t = if m == "allreduce-in-place" { 2.0 } else { 1.0 };
        lines.push(row(m, 131072, &[t; 3], with_times));
    }
    lines.join("\n") + "\n"
}

fn ratios(args: &[&str]) -> String {
    common::python_script("bench/bench_comm_ratios.py", args)
}

fn line_of<'t>(text: &'t str, bytes: &str) -> &'t str {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(bytes))
        .unwrap_or_else(|| panic!("no row for {bytes}: {text}"))
}

#[test]
fn both_estimates_against_the_best_raw_call_pooled_over_rounds() {
    let dir = tempfile::tempdir().unwrap();
    // Round 1: iteration by iteration the exchange runs at 0.4, 0.5 and 1.0 of the in-place
    // call's speed; round 2, on a slower machine, at its speed. Paired over both rounds'
    // six operations: the median of 0.4, 0.5, 1, 1, 1, 1 is 1.0 (the median of the rounds'
    // medians would be 0.75; pairs made of the two sorted lists, 0.9).
    let r1 = dir.path().join("vc-test.r1.jsonl");
    let r2 = dir.path().join("vc-test.r2.jsonl");
    std::fs::write(&r1, round([1.0, 3.0, 2.0], [2.5, 6.0, 2.0], true, &[])).unwrap();
    std::fs::write(&r2, round([2.0; 3], [2.0; 3], true, &[])).unwrap();
    let text = ratios(&["sizes", r1.to_str().unwrap(), r2.to_str().unwrap()]);
    // Of medians: the exchange's bandwidth (the median over the rounds of 1/2.5 and 1/2,
    // per byte) over the in-place call's (1/2 in both rounds): 0.90.
    let small = line_of(&text, "65536");
    assert!(small.contains("in place"), "{small}");
    let cells: Vec<&str> = small.split("x |").collect();
    assert!(cells[0].ends_with("0.90"), "{small}");
    assert!(cells[1].trim_start().starts_with("1.00x"), "{small}");
    // The out-of-place call is the best raw call at 128 KiB, and the reference of both.
    let large = line_of(&text, "131072");
    assert!(large.contains(" out "), "{large}");
    assert!(large.contains("1.00x | 1.00x"), "{large}");
    assert!(
        text.contains("paired: 1.000-1.000x, >= 0.9x at 2 of 2 sizes"),
        "{text}"
    );

    let summary = ratios(&["summary", dir.path().to_str().unwrap()]);
    let test = summary
        .lines()
        .find(|l| l.starts_with("test "))
        .expect(&summary);
    assert!(
        test.contains("(0.900-1.000)") && test.contains(" 2/2 "),
        "{test}"
    );
}

#[test]
fn rounds_are_paired_with_themselves_and_old_records_have_no_paired_figure() {
    let dir = tempfile::tempdir().unwrap();
    // An old round (no operations' times, no control, no node-aware exchange) on a machine
    // ten times slower, then a new one: only the new round pairs, against itself.
    let old = dir.path().join("old.jsonl");
    let new = dir.path().join("new.jsonl");
    std::fs::write(
        &old,
        round([10.0; 3], [20.0; 3], false, &["control", "hierarchical"]),
    )
    .unwrap();
    std::fs::write(&new, round([1.0; 3], [1.0; 3], true, &[])).unwrap();
    let text = ratios(&["sizes", old.to_str().unwrap()]);
    let small = line_of(&text, "65536");
    assert!(small.contains("0.50x | -"), "{small}");
    assert!(!text.contains("paired:"), "{text}");
    let text = ratios(&["sizes", old.to_str().unwrap(), new.to_str().unwrap()]);
    let small = line_of(&text, "65536");
    let cells: Vec<&str> = small.split('|').map(str::trim).collect();
    // exchange | hierarchical … control: the exchange paired from the new round alone (1.00),
    // the control too, though the old round lacks it.
    assert!(cells[1].starts_with("1.00x"), "{small}");
    assert!(small.trim_end().ends_with("1.00x"), "{small}");
}
