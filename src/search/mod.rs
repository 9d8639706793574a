//! The AutoML search: network morphisms that propose neighbour architectures, the edit
//! distance and Gaussian process behind Bayesian optimisation over them, TPE for the
//! hyperparameters, and a simulator that runs both without training.

pub mod bayes;
pub mod distance;
pub mod gp;
pub mod morphism;
pub mod sim;
pub mod tpe;

/// The architecture search as the rules name it (`aiperf-rules-6`): network morphism guided
/// by Bayesian optimisation. Bump the version whenever its behaviour changes. Version 2
/// fits the Gaussian process on at most [`bayes::MAX_FIT`] models (version 1 on all);
/// version 3 proposes from those models alone (the generators are sent the fitting set,
/// not the history: a neighbour that repeats a model outside it is refused by the
/// primary's de-duplication instead of skipped), the same proposals up to the bound.
pub const ARCHITECTURE_SEARCH: (&str, u32) = ("network-morphism-bo", 3);
/// The hyperparameter search as the rules name it: TPE with hyperopt's semantics; version 2
/// models the most recent [`tpe::TPE_WINDOW`] observations (version 1 all of them).
pub const HPO: (&str, u32) = ("tpe", 2);

pub use bayes::{BayesConfig, BayesOptimizer, Observed, Proposal, SearchStats};
pub use morphism::{random_morphism, Limits, MorphError, Morphism};
pub use tpe::{Hparams, Space, Tpe, TpeConfig};
