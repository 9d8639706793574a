//! `aiperf score --trace FILE.json`: the spans `aiperf run --trace-steps N` recorded, as a
//! Chrome trace (the JSON Perfetto and chrome://tracing open): one process per group, one
//! track per rank, every span a complete event on the common clock from the run's start.

use serde_json::{json, Value};

use crate::reader::Run;

/// The name of a span kind as `schema::TraceRow::kind` codes it.
pub fn kind_name(kind: u8) -> &'static str {
    match kind {
        0 => "data wait",
        1 => "forward+backward",
        2 => "exchange",
        3 => "optimizer",
        _ => "unknown",
    }
}

/// The Chrome-trace document of `run`'s spans; `None` when it recorded none.
pub fn chrome_trace(run: &Run) -> Option<Value> {
    let t0 = run.info.start_time_s;
    let mut events = Vec::new();
    for g in run.groups.iter().filter(|g| !g.trace.is_empty()) {
        events.push(json!({
            "ph": "M", "name": "process_name", "pid": g.group,
            "args": { "name": format!("group {}", g.group) }
        }));
        let mut ranks: Vec<u32> = g.trace.iter().map(|r| r.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        for r in ranks {
            events.push(json!({
                "ph": "M", "name": "thread_name", "pid": g.group, "tid": r,
                "args": { "name": format!("rank {r}") }
            }));
        }
        for s in &g.trace {
            let name = match s.kind {
                2 => format!("exchange bucket {}", s.bucket),
                k => kind_name(k).to_string(),
            };
            events.push(json!({
                "ph": "X", "name": name, "cat": kind_name(s.kind),
                "pid": g.group, "tid": s.rank,
                "ts": (s.start_s - t0) * 1e6,
                "dur": ((s.end_s - s.start_s) * 1e6).max(0.0),
                "args": { "model": s.model_id, "epoch": s.epoch, "step": s.step }
            }));
        }
    }
    (!events.is_empty()).then(|| json!({ "traceEvents": events, "displayTimeUnit": "ms" }))
}
