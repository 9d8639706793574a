//! The AutoML search: network morphisms that propose neighbour architectures, the edit
//! distance and Gaussian process behind Bayesian optimisation over them, TPE for the
//! hyperparameters, and a simulator that runs both without training.

pub mod bayes;
pub mod distance;
pub mod gp;
pub mod morphism;
pub mod sim;
pub mod tpe;

pub use bayes::{BayesConfig, BayesOptimizer, Observed, Proposal, SearchStats};
pub use morphism::{random_morphism, Limits, MorphError, Morphism};
pub use tpe::{Hparams, Space, Tpe, TpeConfig};
