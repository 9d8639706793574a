//! The virtual cluster's exchange scenarios (4 and 5 of `main.rs`): comm-bench across the
//! nodes, and the node-aware exchange and `auto` across them in `dp-check`.

use std::process::Command;

use super::{aiperf_env, link_bytes, run_for, text, vc};

/// Scenario 4: comm-bench with 2 ranks on each of 3 nodes: the world (across the network)
/// and the groups of 2 (within a node), reported apart.
pub(super) fn comm_bench_across_nodes() {
    let before = link_bytes(2);
    let out = run_for(
        300,
        aiperf_env(Command::new(vc()).args([
            "mpirun",
            "-np",
            "6",
            "--host",
            "node1:2,node2:2,node3:2",
            "--map-by",
            "slot",
            env!("CARGO_BIN_EXE_aiperf"),
            "comm-bench",
            "--group-size",
            "2",
            "--min-bytes",
            "65536",
            "--max-bytes",
            "1048576",
            "--iters",
            "5",
            "--json",
        ])),
    );
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let scope = |r: &serde_json::Value| r["scope"].as_str().unwrap_or("").to_string();
    let world: Vec<_> = rows.iter().filter(|r| scope(r) == "world").collect();
    let within: Vec<_> = rows
        .iter()
        .filter(|r| scope(r).starts_with("groups of 2"))
        .collect();
    // 5 sizes × 6 methods each: the raw all-reduce out of place and in place, the
    // training's exchange in place and through copies, the node-aware one and the in-place
    // call again (control).
    assert_eq!(world.len(), 30, "{rows:?}");
    assert_eq!(within.len(), 30, "{rows:?}");
    for m in [
        "allreduce",
        "allreduce-in-place",
        "exchange",
        "exchange-copy",
        "hierarchical",
        "control",
    ] {
        assert_eq!(world.iter().filter(|r| r["method"] == m).count(), 5, "{m}");
    }
    assert!(world.iter().all(|r| r["ranks"] == 6));
    assert!(within.iter().all(|r| r["ranks"] == 2));
    for r in world.iter().chain(&within) {
        assert!(r["busbw"].as_f64().unwrap() > 0.0, "{r}");
    }
    // Across the nodes with one rank each, and within one node, reported apart.
    let across: Vec<_> = rows
        .iter()
        .filter(|r| scope(r).starts_with("across 3 nodes"))
        .collect();
    let node: Vec<_> = rows
        .iter()
        .filter(|r| scope(r).starts_with("within a node"))
        .collect();
    assert_eq!((across.len(), node.len()), (30, 30), "{rows:?}");
    assert!(across.iter().all(|r| r["ranks"] == 3) && node.iter().all(|r| r["ranks"] == 2));
    // The world's all-reduces crossed node2's link: at least the 1 MiB ones, 5 times.
    let sent = link_bytes(2) - before;
    assert!(sent > 5 << 20, "only {sent} bytes over node2's link");
}

/// Scenario 5: the node-aware exchange across 3 nodes of 2 ranks (each node's two shards
/// summed onto its ranks over shared memory, all-reduced across the nodes among the ranks of
/// the same index, gathered back inside the node) keeps every rank bit-identical and trains
/// as the flat exchange does, up to summation order; `auto`, the default, times both on this
/// layout and trains with the faster, bit for bit; and buckets that wait at the barrier
/// before crossing the nodes complete on every rank.
pub(super) fn hierarchical_exchange_across_nodes() {
    let dp = |extra: &[&str]| -> serde_json::Value {
        let out = run_for(
            300,
            aiperf_env(
                Command::new(vc())
                    .args(["mpirun", "-np", "6", "--host", "node1:2,node2:2,node3:2"])
                    .args(["--map-by", "slot", env!("CARGO_BIN_EXE_aiperf"), "dp-check"])
                    .args(["--frozen-bn", "--bucket-bytes", "4096"])
                    .args(extra),
            ),
        );
        assert!(out.status.success(), "{extra:?}: {}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(stdout.lines().rfind(|l| l.starts_with('{')).unwrap()).unwrap()
    };
    let flat = dp(&["--exchange", "allreduce"]);
    let hier = dp(&["--exchange", "hierarchical"]);
    // The default, `auto`: across nodes of 2 ranks both exchanges are timed on the group.
    let auto = dp(&[]);
    for r in [&flat, &hier, &auto] {
        assert_eq!(r["identical"], true, "{r}");
        assert_eq!(r["ranks"], 6, "{r}");
    }
    let (a, b) = (
        flat["param_sum"].as_f64().unwrap(),
        hier["param_sum"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "{a} vs {b}");
    let c = &auto["choice"]["groups"][0];
    assert_eq!(
        (c["nodes"].as_u64(), c["ranks_per_node"].as_u64()),
        (Some(3), Some(2))
    );
    let (f, h) = (
        c["flat_s"].as_f64().unwrap(),
        c["hierarchical_s"].as_f64().unwrap(),
    );
    assert!(f > 0.0 && h > 0.0, "{c}");
    // The faster one is taken, and it is the one that ran: its training is that exchange's,
    // bit for bit.
    let (taken, same_as) = if h < f {
        ("hierarchical", &hier)
    } else {
        ("allreduce", &flat)
    };
    assert_eq!(auto["choice"]["method"], taken, "{auto}");
    assert_eq!(auto["exchange"], taken, "{auto}");
    assert_eq!(auto["param_sum"], same_as["param_sum"], "{auto}");
    // Buckets of 1 MiB after the first wait at a barrier across the nodes, in the node-aware
    // exchange too: 4 MiB in 1 MiB buckets, every method, completes on every rank (a rank
    // skipping a barrier would leave the others waiting until the time limit).
    let out = run_for(
        300,
        aiperf_env(
            Command::new(vc())
                .args(["mpirun", "-np", "6", "--host", "node1:2,node2:2,node3:2"])
                .args([
                    "--map-by",
                    "slot",
                    env!("CARGO_BIN_EXE_aiperf"),
                    "comm-bench",
                ])
                .args(["--min-bytes", "4194304", "--max-bytes", "4194304"])
                .args(["--bucket-bytes", "1048576", "--iters", "2", "--json"]),
        ),
    );
    assert!(out.status.success(), "{}", text(&out));
    let rows = String::from_utf8_lossy(&out.stdout);
    assert!(
        rows.lines()
            .any(|l| l.contains("\"hierarchical\"") && l.contains("\"world\"")),
        "{rows}"
    );
}
