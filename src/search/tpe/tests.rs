//! TPE tests: hyperopt's estimator pieces computed by hand, and a statistical comparison
//! with random search on a synthetic objective.

use super::*;

#[test]
fn forgetting_weights_ramp_the_oldest() {
    assert_eq!(forgetting_weights(3, 25), vec![1.0; 3]);
    let w = forgetting_weights(30, 25);
    assert_eq!(w.len(), 30);
    // numpy.linspace(1/30, 1, 5) then 25 ones.
    let want = [
        1.0 / 30.0,
        0.275,
        0.516_666_666_666_666_7,
        0.758_333_333_333_333_3,
        1.0,
    ];
    for (a, b) in w[..5].iter().zip(want) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
    assert!(w[5..].iter().all(|&x| x == 1.0));
}

#[test]
fn adaptive_parzen_matches_hyperopt_by_hand() {
    let cfg = TpeConfig::default();
    // Two observations around the prior: sorted mus [2, 5, 8], gaps 3, prior sigma 10,
    // minimum sigma 10 / min(100, 1 + 3) = 2.5.
    let g = adaptive_parzen(&[8.0, 2.0], &cfg, 5.0, 10.0);
    assert_eq!(g.mus, vec![2.0, 5.0, 8.0]);
    assert_eq!(g.sigmas, vec![3.0, 10.0, 3.0]);
    assert!(g.weights.iter().all(|w| (w - 1.0 / 3.0).abs() < 1e-12));
    // One observation above the prior: prior first, the observation at half the prior sigma.
    let g = adaptive_parzen(&[9.0], &cfg, 5.0, 10.0);
    assert_eq!(
        (g.mus.clone(), g.sigmas.clone()),
        (vec![5.0, 9.0], vec![10.0, 5.0])
    );
    // Close observations: sigmas clipped up to the minimum.
    let g = adaptive_parzen(&[5.1, 5.2, 5.3], &cfg, 0.0, 10.0);
    assert_eq!(g.mus, vec![0.0, 5.1, 5.2, 5.3]);
    assert!((g.sigmas[2] - 2.0).abs() < 1e-12, "{:?}", g.sigmas); // 10 / (1 + 4)
}

#[test]
fn quantised_density_sums_to_one_over_the_integers() {
    let cfg = TpeConfig::default();
    let g = adaptive_parzen(&[20.0, 64.0, 100.0, 101.0], &cfg, 72.0, 112.0);
    let total: f64 = (16..=128)
        .map(|x| g.log_pdf_q1(f64::from(x), 16.0, 128.0).exp())
        .sum();
    assert!((total - 1.0).abs() < 1e-9, "{total}");
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for _ in 0..1000 {
        let x = g.sample(16.0, 128.0, &mut rng);
        assert!((16.0..=128.0).contains(&x) && x.fract() == 0.0);
    }
}

#[test]
fn categorical_posterior_adds_the_prior_to_counts() {
    let cfg = TpeConfig::default();
    let p = categorical(&[0, 2, 2], 3, &cfg);
    assert_eq!(p, vec![2.0 / 6.0, 1.0 / 6.0, 3.0 / 6.0]);
}

#[test]
fn suggestions_stay_in_the_space_and_start_random() {
    let space = Space {
        batch_size: (8, 20),
        kernel_sizes: vec![3, 5, 7],
    };
    let mut tpe = Tpe::new(
        TpeConfig {
            startup: 5,
            ..TpeConfig::default()
        },
        space,
    )
    .unwrap();
    for i in 0..40 {
        let h = tpe.suggest();
        assert!((8..=20).contains(&h.batch_size) && [3, 5, 7].contains(&h.kernel_size));
        tpe.observe(
            h,
            f64::from(h.batch_size) + if i % 2 == 0 { 1.0 } else { f64::NAN },
        );
    }
    assert!(Tpe::new(
        TpeConfig::default(),
        Space {
            batch_size: (9, 8),
            kernel_sizes: vec![3]
        }
    )
    .is_err());
}

/// A synthetic objective: best at batch 40 and kernel 5.
fn loss(h: Hparams) -> f64 {
    let b = (f64::from(h.batch_size) - 40.0) / 112.0;
    b * b + if h.kernel_size == 5 { 0.0 } else { 0.05 }
}

fn best_after(trials: usize, startup: usize, seed: u64) -> f64 {
    let cfg = TpeConfig {
        startup,
        seed,
        ..TpeConfig::default()
    };
    let mut tpe = Tpe::new(cfg, Space::default()).unwrap();
    let mut best = f64::INFINITY;
    for _ in 0..trials {
        let h = tpe.suggest();
        let l = loss(h);
        best = best.min(l);
        tpe.observe(h, l);
    }
    best
}

#[test]
fn tpe_beats_random_search_on_average() {
    // 300 seeds × 30 trials; random search = the same sampler never leaving start-up.
    // The paired difference must be positive by more than 4 standard errors.
    let seeds = 300u64;
    let diffs: Vec<f64> = (0..seeds)
        .map(|s| best_after(30, usize::MAX, s) - best_after(30, 10, s))
        .collect();
    let mean = diffs.iter().sum::<f64>() / seeds as f64;
    let var = diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (seeds - 1) as f64;
    let se = (var / seeds as f64).sqrt();
    assert!(
        mean > 4.0 * se,
        "TPE's advantage {mean:.5} is not significant (standard error {se:.5})"
    );
}

/// Regression: `--batch-size 32` (low = high) spun the primary forever in the sampler
/// after the start-up trials.
#[test]
fn regression_fixed_batch_size_suggests_after_startup_without_hanging() {
    let space = Space {
        batch_size: (32, 32),
        kernel_sizes: vec![3, 5, 7],
    };
    let mut tpe = Tpe::new(TpeConfig::default(), space).unwrap();
    for i in 0..40 {
        let h = tpe.suggest();
        assert_eq!(h.batch_size, 32);
        tpe.observe(h, 1.0 / f64::from(i + 1));
    }
}

/// A window of `w` observations: every suggestion is the one a TPE fed only the latest `w`
/// would make (so a suggestion's work is bounded by the window, not the run's length), and
/// below the window nothing changes.
#[test]
fn suggestions_model_only_the_latest_window_of_observations() {
    let tpe = |window: usize| {
        Tpe::new(
            TpeConfig {
                startup: 5,
                window,
                seed: 3,
                ..TpeConfig::default()
            },
            Space::default(),
        )
        .unwrap()
    };
    let obs: Vec<(Hparams, f64)> = (0..60u32)
        .map(|i| {
            let h = Hparams {
                batch_size: 16 + (i * 37) % 113,
                kernel_size: [3, 5, 7][(i % 3) as usize],
            };
            (h, f64::from((i * 11) % 17) / 17.0)
        })
        .collect();
    let (mut windowed, mut latest, mut unbounded) = (tpe(20), tpe(1000), tpe(1000));
    for &(h, loss) in &obs {
        windowed.observe(h, loss);
        unbounded.observe(h, loss);
    }
    for &(h, loss) in &obs[40..] {
        latest.observe(h, loss);
    }
    let draws = |t: &mut Tpe| (0..10).map(|_| t.suggest()).collect::<Vec<_>>();
    let w = draws(&mut windowed);
    assert_eq!(w, draws(&mut latest));
    assert_ne!(
        w,
        draws(&mut unbounded),
        "the window changes what 60 observations give"
    );
    // Up to the window, the same as without one.
    let (mut small, mut big) = (tpe(60), tpe(1000));
    for &(h, loss) in &obs {
        small.observe(h, loss);
        big.observe(h, loss);
    }
    assert_eq!(draws(&mut small), draws(&mut big));
}
