//! The primary's state machine without MPI, over an in-memory record sink.

use super::resume::Resumed;
use super::*;
use crate::arch::{by_name, Shape};
use aiperf_records::schema::TrialStatus;
use rand::SeedableRng;

const DEADLINE: f64 = 1000.0;

fn space() -> Space {
    Space {
        batch_size: (16, 64),
        kernel_sizes: vec![3, 5, 7],
    }
}

fn defaults() -> Hparams {
    Hparams {
        batch_size: 40,
        kernel_size: 3,
    }
}

/// Two groups, led by world ranks 1 and 3.
fn primary() -> Primary<MemorySink> {
    primary_with(PrimaryConfig {
        leaders: vec![1, 3],
        space: space(),
        defaults: defaults(),
        seed: 9,
        deadline_s: DEADLINE,
        stop_after_epochs: None,
        stop_after_trials: None,
        view_bound: crate::search::bayes::MAX_FIT,
    })
}

/// A primary with `cfg` (built from [`primary`]'s).
fn primary_with(cfg: PrimaryConfig) -> Primary<MemorySink> {
    Primary::new(MemorySink::default(), cfg).unwrap()
}

fn graph(name: &str) -> Graph {
    by_name(name, Shape::new(1, 28, 28), 10).unwrap()
}

fn register(p: &mut Primary<MemorySink>, rank: i32, group: u32, name: &str) -> ToGroup {
    let msg = ToPrimary::Register {
        group,
        father: None,
        graph: graph(name),
    };
    p.handle(rank, msg, 10.0, false).unwrap().unwrap()
}

fn result(group: u32, model_id: u64, acc: f64, h: Hparams) -> ToPrimary {
    ToPrimary::Result {
        group,
        model_id,
        accuracy: acc,
        reported: acc,
        epochs: 2,
        hparams: h,
        failed: false,
    }
}

fn suggest(p: &mut Primary<MemorySink>, rank: i32, group: u32, father: Option<u64>) -> ToGroup {
    let msg = ToPrimary::Suggest {
        group,
        round: 0,
        father,
    };
    p.handle(rank, msg, 20.0, false).unwrap().unwrap()
}

#[test]
fn registration_gives_global_ids_and_deduplicates_across_groups() {
    let mut p = primary();
    assert_eq!(
        register(&mut p, 1, 0, "resnet8"),
        ToGroup::Registered { model_id: 0 }
    );
    assert_eq!(
        register(&mut p, 3, 1, "resnet8"),
        ToGroup::Duplicate {
            history: ViewDelta::default()
        }
    );
    assert_eq!(
        register(&mut p, 3, 1, "resnet20"),
        ToGroup::Registered { model_id: 1 }
    );
    let sink = p.into_sink();
    assert_eq!(
        sink.architectures.iter().map(|a| a.0).collect::<Vec<_>>(),
        [0, 1]
    );
}

#[test]
fn warmup_rounds_use_the_fathers_or_default_hparams_and_tpe_from_the_fourth_round() {
    let mut p = primary();
    // Round 1: no father, the preset's defaults.
    assert_eq!(suggest(&mut p, 1, 0, None), ToGroup::Hparams(defaults()));
    register(&mut p, 1, 0, "resnet8");
    let h0 = Hparams {
        batch_size: 17,
        kernel_size: 5,
    };
    p.handle(1, result(0, 0, 0.5, h0), 30.0, false).unwrap();
    // Rounds 2 and 3: the father's hyperparameters.
    for (round, name) in [(1, "resnet20"), (2, "resnet18")] {
        assert_eq!(
            suggest(&mut p, 1, 0, Some(0)),
            ToGroup::Hparams(h0),
            "round {round}"
        );
        let ToGroup::Registered { model_id } = register(&mut p, 1, 0, name) else {
            panic!("registered")
        };
        p.handle(1, result(0, model_id, 0.6, h0), 40.0, false)
            .unwrap();
    }
    // Round 4: TPE (its first draw from the same seed).
    let mut tpe = Tpe::new(
        TpeConfig {
            seed: 9,
            ..TpeConfig::default()
        },
        space(),
    )
    .unwrap();
    assert_eq!(
        suggest(&mut p, 1, 0, Some(0)),
        ToGroup::Hparams(tpe.suggest())
    );
    // The other group is still in its warm-up.
    assert_eq!(suggest(&mut p, 3, 1, None), ToGroup::Hparams(defaults()));
}

#[test]
fn regression_a_repeated_result_is_recorded_once() {
    let mut p = primary();
    register(&mut p, 1, 0, "resnet8");
    let first = p
        .handle(1, result(0, 0, 0.5, defaults()), 30.0, false)
        .unwrap();
    assert!(matches!(first, Some(ToGroup::History(ref h)) if h.added.len() == 1));
    let again = p
        .handle(1, result(0, 0, 0.5, defaults()), 31.0, false)
        .unwrap();
    assert_eq!(again, Some(ToGroup::History(ViewDelta::default())));
    assert_eq!(
        p.trial_counts(),
        Trials {
            finished: 1,
            running: 0
        }
    );
    let sink = p.into_sink();
    assert_eq!((sink.trials.len(), sink.tpe.len()), (1, 1));
}

#[test]
fn regression_state_is_indexed_by_the_sender_not_the_message() {
    let mut p = primary();
    // A message claiming another group than the sender's is refused (it used to index
    // rounds[group] and panic rank 0 on a wrong id).
    let lie = ToPrimary::Suggest {
        group: 7,
        round: 0,
        father: None,
    };
    let e = p.handle(1, lie, 1.0, false).unwrap_err();
    assert!(
        matches!(
            e,
            PrimaryError::WrongGroup {
                rank: 1,
                claimed: 7,
                actual: 0
            }
        ),
        "{e}"
    );
    let e = p.handle(2, bye(0, 0), 1.0, false).unwrap_err();
    assert!(matches!(e, PrimaryError::NotALeader { rank: 2 }), "{e}");
    // A result for a model another group registered.
    register(&mut p, 1, 0, "resnet8");
    let e = p
        .handle(3, result(1, 0, 0.5, defaults()), 2.0, false)
        .unwrap_err();
    assert!(
        matches!(
            e,
            PrimaryError::Unregistered {
                group: 1,
                model_id: 0
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("did not register"));
}

#[test]
fn the_run_stops_at_the_deadline_and_its_end_is_the_deadline() {
    let mut p = primary();
    register(&mut p, 1, 0, "resnet8");
    let progress = ToPrimary::Progress {
        group: 0,
        model_id: 0,
        epoch: 1,
        val_accuracy: 0.4,
        ops: 1000,
    };
    assert_eq!(
        p.handle(1, progress.clone(), 999.0, false).unwrap(),
        Some(ToGroup::Continue)
    );
    assert_eq!(p.end(), None);
    assert_eq!(
        p.handle(1, progress, 1003.0, false).unwrap(),
        Some(ToGroup::Stop)
    );
    assert_eq!(p.end(), Some(DEADLINE));
    assert_eq!(suggest(&mut p, 3, 1, None), ToGroup::Stop);
    // A result after the deadline is recorded as stopped.
    p.handle(1, result(0, 0, 0.5, defaults()), 1004.0, false)
        .unwrap();
    assert_eq!(p.totals().epochs, 2);
    assert_eq!(p.into_sink().trials[0].status, TrialStatus::Stopped);
}

#[test]
fn the_run_stops_once_the_epochs_asked_for_are_reported() {
    let mut p = primary_with(PrimaryConfig {
        stop_after_epochs: Some(3),
        ..primary().cfg
    });
    register(&mut p, 1, 0, "resnet8");
    register(&mut p, 3, 1, "resnet20");
    let progress = |group, model_id| ToPrimary::Progress {
        group,
        model_id,
        epoch: 1,
        val_accuracy: 0.4,
        ops: 1000,
    };
    // Epochs over all groups count: two (one per group) go on, the third ends the run then.
    for (rank, group, model, now) in [(1, 0, 0, 100.0), (3, 1, 1, 120.0)] {
        let reply = p.handle(rank, progress(group, model), now, false).unwrap();
        assert_eq!(reply, Some(ToGroup::Continue));
    }
    assert_eq!(p.end(), None);
    let reply = p.handle(1, progress(0, 0), 150.0, false).unwrap();
    assert_eq!(reply, Some(ToGroup::Stop));
    assert_eq!(p.end(), Some(150.0));
    assert_eq!(suggest(&mut p, 3, 1, None), ToGroup::Stop);
    assert_eq!(p.totals().epochs, 3);
}

#[test]
fn the_run_stops_once_the_trials_asked_for_ended_failed_ones_too() {
    let mut p = primary_with(PrimaryConfig {
        stop_after_trials: Some(2),
        ..primary().cfg
    });
    register(&mut p, 1, 0, "resnet8");
    register(&mut p, 3, 1, "resnet20");
    let mut failed = result(0, 0, 0.0, defaults());
    // Failed in its first epoch: no epoch completed, so it is not in the history, yet it ended.
    if let ToPrimary::Result {
        failed: f, epochs, ..
    } = &mut failed
    {
        (*f, *epochs) = (true, 0);
    }
    let reply = p.handle(1, failed, 50.0, false).unwrap();
    assert!(matches!(reply, Some(ToGroup::History(_))), "{reply:?}");
    assert_eq!(p.end(), None);
    let reply = p.handle(3, result(1, 1, 0.5, defaults()), 70.0, false);
    // The second trial is recorded as trained; the run ends there, and every group's next
    // request is told so.
    assert!(matches!(reply.unwrap(), Some(ToGroup::History(_))));
    assert_eq!(p.end(), Some(70.0));
    assert_eq!(suggest(&mut p, 1, 0, None), ToGroup::Stop);
    let sink = p.into_sink();
    let status: Vec<_> = sink.trials.iter().map(|t| t.status).collect();
    assert_eq!(status, [TrialStatus::Failed, TrialStatus::Finished]);
}

#[test]
fn a_halt_ends_the_run_at_that_moment() {
    let mut p = primary();
    assert_eq!(suggest(&mut p, 1, 0, None), ToGroup::Hparams(defaults()));
    let msg = ToPrimary::Register {
        group: 0,
        father: None,
        graph: graph("resnet8"),
    };
    assert_eq!(p.handle(1, msg, 500.0, true).unwrap(), Some(ToGroup::Stop));
    assert_eq!(p.end(), Some(500.0));
}

#[test]
fn a_failed_trial_is_recorded_as_failed_and_the_worst_for_tpe() {
    let mut p = primary();
    register(&mut p, 1, 0, "resnet8");
    let failed = ToPrimary::Result {
        group: 0,
        model_id: 0,
        accuracy: 0.3,
        reported: 0.3,
        epochs: 1,
        hparams: defaults(),
        failed: true,
    };
    assert!(matches!(
        p.handle(1, failed, 5.0, false).unwrap(),
        Some(ToGroup::History(_))
    ));
    let sink = p.into_sink();
    assert_eq!(sink.trials[0].status, TrialStatus::Failed);
    assert_eq!(sink.tpe[0].loss, 1.0);
}

#[test]
fn a_restored_primary_goes_on_from_the_recorded_rounds_ids_and_totals() {
    let mut p = primary();
    let mut seen = std::collections::HashSet::new();
    seen.insert(graph("resnet8").descriptor());
    p.restore(Resumed {
        next_id: 5,
        seen,
        rounds: vec![3, 1],
        totals: Totals {
            epochs: 4,
            ops: 99,
            best: 0.7,
        },
        ..Resumed::default()
    });
    assert_eq!(
        register(&mut p, 1, 0, "resnet8"),
        ToGroup::Duplicate {
            history: ViewDelta::default()
        }
    );
    assert_eq!(
        register(&mut p, 1, 0, "resnet20"),
        ToGroup::Registered { model_id: 5 }
    );
    let hello = ToPrimary::Hello {
        group: 1,
        ranks: 1,
        host: "n".into(),
    };
    let welcome = p.handle(3, hello, 1.0, false).unwrap();
    assert!(matches!(welcome, Some(ToGroup::Welcome { round: 1, .. })));
    assert_eq!(p.totals().epochs, 4);
    // Regression: the status line's "running" counts this session's trials only.
    assert_eq!(
        p.trial_counts(),
        Trials {
            finished: 0,
            running: 1
        }
    );
}

fn bye(group: u32, epochs: u64) -> ToPrimary {
    ToPrimary::Bye {
        group,
        chain: aiperf_records::digest::GroupChain {
            group,
            ranks: 1,
            chains: vec![aiperf_records::digest::ChainEnd {
                dataset: "epochs".into(),
                rows: epochs,
                digest: format!("{epochs:064x}"),
            }],
        },
    }
}

#[test]
fn the_chains_of_the_groups_that_said_goodbye_are_kept_in_group_order() {
    let mut p = primary();
    assert!(p.chains().is_empty());
    p.handle(3, bye(1, 4), 1.0, false).unwrap();
    p.handle(1, bye(0, 9), 2.0, false).unwrap();
    let chains = p.chains();
    assert_eq!(
        chains
            .iter()
            .map(|c| (c.group, c.epochs()))
            .collect::<Vec<_>>(),
        vec![(0, 9), (1, 4)]
    );
    assert_eq!(chains[1].chains[0].digest, format!("{:064x}", 4));
}

/// Every group's Result reply carries at most the view's bound of models, however many
/// groups and trained models there are, and what a group holds after applying its replies
/// is the view (the fitting set of the whole history).
#[test]
fn replies_are_bounded_by_the_view_whatever_the_groups_and_the_history() {
    let groups = 40usize;
    let mut p = primary_with(PrimaryConfig {
        leaders: (1..=groups).collect(),
        view_bound: 6,
        ..primary().cfg
    });
    let mut held: Vec<Vec<u64>> = vec![Vec::new(); groups];
    // A random walk of morphisms: every step a new architecture.
    let mut current = graph("resnet8");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut trained = 0;
    while trained < 200 {
        let g = trained % groups;
        let Some((_, next)) =
            crate::search::random_morphism(&current, 3, &Default::default(), &mut rng, 3)
        else {
            current = graph("resnet8"); // at the growth limits: start the walk again
            continue;
        };
        current = next.clone();
        let reg = ToPrimary::Register {
            group: g as u32,
            father: None,
            graph: next,
        };
        let Some(ToGroup::Registered { model_id }) =
            p.handle(g as i32 + 1, reg, 5.0, false).unwrap()
        else {
            continue;
        };
        let acc = ((model_id * 13) % 17) as f64 / 17.0;
        let reply = p
            .handle(
                g as i32 + 1,
                result(g as u32, model_id, acc, defaults()),
                6.0,
                false,
            )
            .unwrap();
        let Some(ToGroup::History(delta)) = reply else {
            panic!("{reply:?}")
        };
        assert!(delta.added.len() <= 6, "{} models sent", delta.added.len());
        let h = &mut held[g];
        h.retain(|id| !delta.removed.contains(id));
        h.extend(delta.added.iter().map(|e| e.model_id));
        h.sort_unstable();
        assert_eq!(&h[..], p.view.chosen(), "group {g} after model {model_id}");
        trained += 1;
    }
}
