//! Messages between the primary and the group leaders (docs/design.md §2): serde types encoded
//! with bincode inside a versioned envelope. Receivers check the size before decoding (the
//! primary probes a message's length first) and refuse another protocol version by name.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::arch::Graph;
use crate::search::Hparams;

/// Version of these messages; both ends must agree.
pub const PROTOCOL_VERSION: u16 = 5;
/// Default largest message accepted (a view of the search's bound of ResNet-50-sized graphs
/// fits many times over).
pub const DEFAULT_LIMIT_BYTES: usize = 64 << 20;

/// A leader's request or report to the primary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToPrimary {
    /// A group announces itself.
    Hello {
        /// Group number.
        group: u32,
        /// Ranks in the group.
        ranks: u32,
        /// Host of the leader.
        host: String,
    },
    /// Register a candidate: the primary assigns a global id or reports a duplicate.
    Register {
        /// Group asking.
        group: u32,
        /// Father's model id (`None` for an initial model).
        father: Option<u64>,
        /// The candidate's architecture (the primary derives its descriptor itself).
        graph: Graph,
    },
    /// Ask for the next trial's hyperparameters.
    Suggest {
        /// Group asking.
        group: u32,
        /// The group's round.
        round: u32,
        /// The registered candidate's father (warm-up rounds take its hyperparameters).
        father: Option<u64>,
    },
    /// A completed epoch.
    Progress {
        /// Group.
        group: u32,
        /// Model id.
        model_id: u64,
        /// Epoch number.
        epoch: u32,
        /// Its validation accuracy.
        val_accuracy: f64,
        /// Its operations (training + validation, docs/design.md §4), for the status line.
        ops: u64,
    },
    /// A finished trial; the primary answers with what changed in the view.
    Result {
        /// Group.
        group: u32,
        /// Model id.
        model_id: u64,
        /// Best measured validation accuracy.
        accuracy: f64,
        /// The value for the search (predicted final accuracy in warm-up rounds).
        reported: f64,
        /// Epochs completed.
        epochs: u32,
        /// Hyperparameters used.
        hparams: Hparams,
        /// The loss became non-finite: the trial failed (its completed epochs count).
        failed: bool,
    },
    /// The group stopped and closed its records.
    Bye {
        /// Group.
        group: u32,
        /// Its digest chain as it closed its records (kept by the primary at a clean stop).
        chain: aiperf_records::digest::GroupChain,
    },
}

impl ToPrimary {
    /// The group the message says it comes from (the primary checks it against the
    /// sender's rank).
    pub fn group(&self) -> u32 {
        match self {
            ToPrimary::Hello { group, .. }
            | ToPrimary::Register { group, .. }
            | ToPrimary::Suggest { group, .. }
            | ToPrimary::Progress { group, .. }
            | ToPrimary::Result { group, .. }
            | ToPrimary::Bye { group, .. } => *group,
        }
    }
}

/// A trained model, as the primary shares it with the groups' generators.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Global model id.
    pub model_id: u64,
    /// Father's id.
    pub father: Option<u64>,
    /// The architecture, shared between the primary's view and the replies that carry it
    /// (serialised as the graph itself).
    pub graph: Arc<Graph>,
    /// The value the search maximises.
    pub accuracy: f64,
    /// Its place in the run's history (the order the generators fit in).
    pub position: u64,
}

/// What changed in the view of the history the groups' generators use (the search's
/// fitting set, docs/design.md §2) since the group's last reply: the models that entered it,
/// in history order, and the ids that left it. Bounded by the view, whatever the number of
/// groups or trained models.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ViewDelta {
    /// Models that entered the view, in history order.
    pub added: Vec<HistoryEntry>,
    /// Ids of models that left it.
    pub removed: Vec<u64>,
}

/// The primary's answer or instruction to a leader.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToGroup {
    /// The candidate's global model id.
    Registered {
        /// Assigned id.
        model_id: u64,
    },
    /// The candidate duplicates a seen architecture; generate another.
    Duplicate {
        /// What changed in the view (so its generator proposes from it next).
        history: ViewDelta,
    },
    /// Hyperparameters for the next trial.
    Hparams(Hparams),
    /// What changed in the view since this group's last reply.
    History(ViewDelta),
    /// The answer to Hello: the view, and the group's round (its finished trials; non-zero
    /// when the run was resumed).
    Welcome {
        /// The view of the history so far.
        history: ViewDelta,
        /// Trials this group has finished.
        round: u32,
    },
    /// Go on (the answer to a progress report before the deadline).
    Continue,
    /// Stop: the deadline passed (or the run was interrupted).
    Stop,
}

/// Why a message could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Larger than the receiver accepts.
    #[error("message of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Sent by another protocol version.
    #[error("message from protocol version {found}, this aiperf speaks version {expected}: run the same aiperf build on every rank")]
    Version {
        /// The sender's version.
        found: u16,
        /// Ours.
        expected: u16,
    },
    /// Not a message of this protocol.
    #[error("undecodable message: {0}")]
    Decode(String),
}

#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    version: u16,
    body: T,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// The decoding configuration: a claimed length (of a string, a list) beyond
/// [`DEFAULT_LIMIT_BYTES`] is an error before anything is allocated — without the limit,
/// bincode allocates the length a damaged message claims and the rank aborts.
fn decode_config() -> bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<DEFAULT_LIMIT_BYTES>,
> {
    config().with_limit::<DEFAULT_LIMIT_BYTES>()
}

/// Encodes a message in its envelope.
pub fn encode<T: Serialize>(body: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(
        Envelope {
            version: PROTOCOL_VERSION,
            body,
        },
        config(),
    )
    .expect("protocol messages serialise")
}

/// Decodes a message, refusing one larger than `limit` bytes or of another version.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], limit: usize) -> Result<T, ProtocolError> {
    if bytes.len() > limit {
        return Err(ProtocolError::TooLarge {
            size: bytes.len(),
            limit,
        });
    }
    // The version comes first, so it can be checked before the body is interpreted.
    let (version, _): (u16, usize) = bincode::serde::decode_from_slice(bytes, decode_config())
        .map_err(|e| ProtocolError::Decode(e.to_string()))?;
    if version != PROTOCOL_VERSION {
        return Err(ProtocolError::Version {
            found: version,
            expected: PROTOCOL_VERSION,
        });
    }
    let (env, used): (Envelope<T>, usize) =
        bincode::serde::decode_from_slice(bytes, decode_config())
            .map_err(|e| ProtocolError::Decode(e.to_string()))?;
    if used != bytes.len() {
        return Err(ProtocolError::Decode(format!(
            "{} trailing bytes",
            bytes.len() - used
        )));
    }
    Ok(env.body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{resnet50, Shape};

    fn sample() -> Vec<ToPrimary> {
        let g = resnet50(Shape::new(3, 224, 224), 1000);
        let h = Hparams {
            batch_size: 64,
            kernel_size: 5,
        };
        vec![
            ToPrimary::Hello {
                group: 3,
                ranks: 8,
                host: "node7".into(),
            },
            ToPrimary::Register {
                group: 3,
                father: Some(12),
                graph: g,
            },
            ToPrimary::Suggest {
                group: 3,
                round: 4,
                father: Some(12),
            },
            ToPrimary::Progress {
                group: 3,
                model_id: 40,
                epoch: 2,
                val_accuracy: 0.61,
                ops: 1 << 40,
            },
            ToPrimary::Result {
                group: 3,
                model_id: 40,
                accuracy: 0.7,
                reported: 0.74,
                epochs: 15,
                hparams: h,
                failed: false,
            },
            ToPrimary::Bye {
                group: 3,
                chain: aiperf_records::digest::GroupChain {
                    group: 3,
                    ranks: 2,
                    chains: vec![aiperf_records::digest::ChainEnd {
                        dataset: "epochs".into(),
                        rows: 7,
                        digest: "ab".repeat(32),
                    }],
                },
            },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in sample() {
            assert_eq!(
                decode::<ToPrimary>(&encode(&m), DEFAULT_LIMIT_BYTES).unwrap(),
                m
            );
        }
        let g = resnet50(Shape::new(3, 64, 64), 10);
        let answers = vec![
            ToGroup::Registered { model_id: 9 },
            ToGroup::Duplicate {
                history: ViewDelta::default(),
            },
            ToGroup::Hparams(Hparams {
                batch_size: 32,
                kernel_size: 3,
            }),
            ToGroup::History(ViewDelta {
                added: vec![HistoryEntry {
                    model_id: 1,
                    father: None,
                    graph: Arc::new(g),
                    accuracy: 0.5,
                    position: 4,
                }],
                removed: vec![3, 0],
            }),
            ToGroup::Welcome {
                history: ViewDelta::default(),
                round: 7,
            },
            ToGroup::Continue,
            ToGroup::Stop,
        ];
        for m in answers {
            assert_eq!(
                decode::<ToGroup>(&encode(&m), DEFAULT_LIMIT_BYTES).unwrap(),
                m
            );
        }
    }

    #[test]
    fn oversized_foreign_and_garbage_messages_are_refused() {
        let bytes = encode(&sample()[1]);
        assert_eq!(
            decode::<ToPrimary>(&bytes, 100).unwrap_err(),
            ProtocolError::TooLarge {
                size: bytes.len(),
                limit: 100
            }
        );
        let foreign = bincode::serde::encode_to_vec(
            Envelope {
                version: 7u16,
                body: ToGroup::Stop,
            },
            config(),
        )
        .unwrap();
        let e = decode::<ToGroup>(&foreign, DEFAULT_LIMIT_BYTES).unwrap_err();
        assert_eq!(
            e,
            ProtocolError::Version {
                found: 7,
                expected: PROTOCOL_VERSION
            }
        );
        assert!(e.to_string().contains("same aiperf build"));
        assert!(matches!(
            decode::<ToGroup>(
                &[PROTOCOL_VERSION as u8, 0xff, 0xff, 0xff],
                DEFAULT_LIMIT_BYTES
            ),
            Err(ProtocolError::Decode(_))
        ));
        let mut long = encode(&ToGroup::Stop);
        long.push(0);
        assert!(matches!(
            decode::<ToGroup>(&long, DEFAULT_LIMIT_BYTES),
            Err(ProtocolError::Decode(_))
        ));
        // A message that is valid for the other direction is not taken for this one.
        assert!(decode::<ToGroup>(&encode(&sample()[0]), DEFAULT_LIMIT_BYTES).is_err());
    }

    /// Seeded truncations, bit flips and huge length fields over every message kind: each
    /// outcome is a clean error or a message; never a panic or an allocation of the
    /// claimed size.
    #[test]
    fn corruption_sweep_protocol_messages_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let messages: Vec<Vec<u8>> = sample().iter().map(encode).collect();
        let mut refused = 0;
        for case in 0..6000 {
            let mut b = messages[case % messages.len()].clone();
            match case % 3 {
                0 => b.truncate(rng.random_range(0..b.len())),
                1 => {
                    for _ in 0..rng.random_range(1..5) {
                        let i = rng.random_range(0..b.len());
                        b[i] ^= 1 << rng.random_range(0..8);
                    }
                }
                _ => {
                    // bincode's varint marker for a u64 length, then 2^64 - 1.
                    let i = rng.random_range(0..b.len());
                    b.splice(i..i, [0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
                }
            }
            refused += usize::from(decode::<ToPrimary>(&b, DEFAULT_LIMIT_BYTES).is_err());
        }
        assert!(refused > 3000, "{refused}");
    }

    #[test]
    fn a_resnet50_registration_is_compact() {
        let n = encode(&sample()[1]).len();
        assert!(n < 64 << 10, "{n} bytes");
    }
}
