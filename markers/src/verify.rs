//! KIP-890 part 1 on the broker: asking the transaction coordinator, before a producer's first
//! transactional append to a partition, whether the partition is in the producer's ongoing
//! transaction (AddPartitionsToTxn v4+ with `verify_only`).
//!
//! Without the question, a Produce delayed past its transaction's end (a TV1 client retrying
//! after an abort, a request held in a network queue) opens a transaction on the partition
//! that no coordinator knows and nobody will close: a *hanging transaction* that pins the
//! partition's last stable offset, so read_committed consumers stop.
//!
//! The pieces:
//!
//! - The state half is in the participant:
//!   [`PartitionState::start_verification`](crate::participant::PartitionState::start_verification)
//!   says which batches need the question and hands out a guard,
//!   [`PartitionState::check_batch_verified`](crate::participant::PartitionState::check_batch_verified)
//!   appends only with the current guard, and a marker clears it.
//! - [`TxnVerifier`], the trait a broker implements: which coordinator node owns a
//!   transactional id, and one verify-only call to that node for several transactions, in
//!   domain types ([`VerifyTxn`] in, one [`Verdict`] per partition out). The conversions to
//!   and from Kafka's messages for a wire implementation are [`verify_request`] and
//!   [`verdicts_of`].
//! - [`Verifier`], the wrapper the produce path calls: it merges concurrent verifications for
//!   the same coordinator node into one call (one call in flight per node, as Kafka's
//!   `AddPartitionsToTxnManager`; what arrives meanwhile goes in the next one), keeps positive
//!   answers for a short while per (transactional id, producer id, epoch, partition), forgets
//!   them when a marker for the producer is written here ([`Verifier::marker_written`]), and
//!   maps everything to the answer a Produce gets ([`Verdict::produce_code`]).
//!
//! # Produce path
//!
//! ```text
//! per partition, under its lock: BatchHeader::parse → start_verification(&batch, now)
//!     Ok(None)     → check_batch → append → complete_append         (nothing to ask)
//!     Ok(Some(g))  → remember g                                      (ask, lock released)
//!     Err(e)       → answer e.code()
//! verifier.verify(VerifyTxn { transactional_id, producer_id, producer_epoch, partitions })
//! per partition again, under its lock:
//!     verdict.allows_append() → check_batch_verified(&batch, Some(g)) → append → complete_append
//!     otherwise               → answer verdict.produce_code(), append nothing
//! WriteTxnMarkers, after complete_marker: verifier.marker_written(producer_id)
//! ```
//!
//! # Error codes (Kafka's `AddPartitionsToTxnManager` and `ReplicaManager`)
//!
//! | coordinator or call | [`Verdict`] | Produce (v3–v10) |
//! |---|---|---|
//! | NONE | `Verified` | appended |
//! | INVALID_TXN_STATE (48), TRANSACTION_ABORTABLE (120); top-level CLUSTER_AUTHORIZATION_FAILED (31) | `NotInTransaction` | INVALID_TXN_STATE (48) |
//! | PRODUCER_FENCED (90), INVALID_PRODUCER_EPOCH (47) | `ProducerFenced` | INVALID_PRODUCER_EPOCH (47) |
//! | CONCURRENT_TRANSACTIONS (51) | `ConcurrentTransactions` | NOT_ENOUGH_REPLICAS (19), retriable |
//! | NOT_COORDINATOR (16), COORDINATOR_NOT_AVAILABLE (15), COORDINATOR_LOAD_IN_PROGRESS (14); no coordinator found; disconnect or timeout (NETWORK_EXCEPTION, 13) | `CoordinatorUnavailable` | NOT_ENOUGH_REPLICAS (19), retriable |
//! | the coordinator does not support v4 (version mismatch) | `Skipped` | appended without verification, as Kafka does |
//! | verification switched off | `Skipped` | appended |
//! | any other code (INVALID_PRODUCER_ID_MAPPING 49, INVALID_REQUEST 42, ...) | `Other` | that code |
//!
//! Sources: [`AddPartitionsToTxnManager.scala`](https://github.com/apache/kafka/blob/4.1/core/src/main/scala/kafka/server/AddPartitionsToTxnManager.scala)
//! (response mapping) and `ReplicaManager.handleProduceAppend`'s `postVerificationCallback`
//! in [`ReplicaManager.scala`](https://github.com/apache/kafka/blob/4.1/core/src/main/scala/kafka/server/ReplicaManager.scala)
//! (NOT_ENOUGH_REPLICAS "because it does not trigger a metadata refresh").
//!
//! # Transaction version 2: the broker adds the partition (KIP-890 part 2)
//!
//! A TV2 client sends no AddPartitionsToTxn: its first Produce (v12+) or TxnOffsetCommit
//! (v5+) to a partition in a transaction makes the broker add the partition itself, with the
//! same machinery: a [`VerifyTxn`] whose [`VerifyTxn::operation`] is [`Operation::Add`] goes
//! out as AddPartitionsToTxn v5 with `verify_only = false` ([`ADD_VERSION`]), is batched per
//! coordinator node like a verification (never merged with one: the same transaction asked
//! both ways goes in two entries), and a positive answer ([`Verdict::Verified`]: the
//! partition is now in the transaction) lets the batch be appended with the guard
//! `start_verification` handed out before the call, as Kafka's `addOrVerifyTransaction`.
//! Adds are made even when verification is switched off (Kafka skips the coordinator only
//! for a verification that is off, never for an add). Which operation and which error codes
//! a request gets is [`TxnSupport`] (Kafka's `TransactionSupportedOperation`): Produce
//! v3–v10 and TxnOffsetCommit v0–v3 verify and take INVALID_TXN_STATE for a partition that is
//! not in the transaction; Produce v11 and TxnOffsetCommit v4 verify and take
//! TRANSACTION_ABORTABLE (120) as the coordinator said it; Produce v12+ and TxnOffsetCommit
//! v5+ add, take TRANSACTION_ABORTABLE as is, and take CONCURRENT_TRANSACTIONS (51) as is
//! (Kafka's broker retries it for a while first: the previous transaction of a TV2 producer
//! may still be completing) instead of NOT_ENOUGH_REPLICAS. [`Verdict::client_code`] maps.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;
use tokio::time::Instant;
use txn_log::sync::Mutex;
use txn_log::{ErrorCode, ProducerEpoch, ProducerId, TopicPartition};

use crate::participant::ParticipantConfig;

/// Kafka's broker setting that switches verification on or off (default true).
pub const VERIFICATION_ENABLE_KEY: &str = "transaction.partition.verification.enable";

/// The AddPartitionsToTxn version [`verify_request`] is meant for: the first with
/// `verify_only` (v4; the coordinator answers INVALID_TXN_STATE for a partition outside the
/// transaction, v5 may answer TRANSACTION_ABORTABLE, both read as `NotInTransaction`).
pub const VERIFY_VERSION: i16 = 4;

/// The AddPartitionsToTxn version a call with an [`Operation::Add`] is sent at (v5, the
/// version Kafka's brokers send; [`request_version`] picks it).
pub const ADD_VERSION: i16 = 5;

/// The AddPartitionsToTxn version to send [`verify_request`]`(txns)` at: [`ADD_VERSION`] if
/// any transaction is an add, else [`VERIFY_VERSION`].
pub fn request_version(txns: &[VerifyTxn]) -> i16 {
    if txns.iter().any(|t| t.operation == Operation::Add) {
        ADD_VERSION
    } else {
        VERIFY_VERSION
    }
}

/// What the broker asks the coordinator about a transaction's partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Operation {
    /// KIP-890 part 1: are the partitions in the ongoing transaction? (`verify_only = true`;
    /// no write at the coordinator.)
    #[default]
    Verify,
    /// KIP-890 part 2 (transaction version 2): add the partitions to the transaction
    /// (`verify_only = false`), as a TV1 client's AddPartitionsToTxn would have.
    Add,
}

/// What the client's request version implies (Kafka's `TransactionSupportedOperation`):
/// which [`Operation`] its first transactional append to a partition needs and which error
/// codes it understands ([`Verdict::client_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnSupport {
    /// Produce v3–v10, TxnOffsetCommit v0–v3 (`defaultError`): verify; TRANSACTION_ABORTABLE
    /// is answered as INVALID_TXN_STATE.
    DefaultError,
    /// Produce v11, TxnOffsetCommit v4 (`genericErrorSupported`): verify; the client knows
    /// TRANSACTION_ABORTABLE.
    GenericError,
    /// Produce v12+, TxnOffsetCommit v5+ (`addPartition`, a TV2 client): add.
    AddPartition,
}

impl TxnSupport {
    /// For a Produce request of version `v` (Kafka: > 11 add, > 10 generic error).
    pub fn from_produce_version(v: i16) -> Self {
        match v {
            v if v >= 12 => Self::AddPartition,
            11 => Self::GenericError,
            _ => Self::DefaultError,
        }
    }

    /// For a TxnOffsetCommit request of version `v` (Kafka: > 4 add, > 3 generic error).
    pub fn from_txn_offset_commit_version(v: i16) -> Self {
        match v {
            v if v >= 5 => Self::AddPartition,
            4 => Self::GenericError,
            _ => Self::DefaultError,
        }
    }

    /// The question to ask the coordinator.
    pub fn operation(self) -> Operation {
        match self {
            Self::AddPartition => Operation::Add,
            Self::DefaultError | Self::GenericError => Operation::Verify,
        }
    }
}

/// The Kafka error codes this module reads or answers: [`ErrorCode`]'s constants under the
/// names this module always had (the same type and values; no table of its own).
pub mod codes {
    use txn_log::ErrorCode;

    /// NETWORK_EXCEPTION.
    pub const NETWORK_EXCEPTION: ErrorCode = ErrorCode::NETWORK_EXCEPTION;
    /// COORDINATOR_LOAD_IN_PROGRESS.
    pub const COORDINATOR_LOAD_IN_PROGRESS: ErrorCode = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
    /// COORDINATOR_NOT_AVAILABLE.
    pub const COORDINATOR_NOT_AVAILABLE: ErrorCode = ErrorCode::COORDINATOR_NOT_AVAILABLE;
    /// NOT_COORDINATOR.
    pub const NOT_COORDINATOR: ErrorCode = ErrorCode::NOT_COORDINATOR;
    /// NOT_ENOUGH_REPLICAS.
    pub const NOT_ENOUGH_REPLICAS: ErrorCode = ErrorCode::NOT_ENOUGH_REPLICAS;
    /// CLUSTER_AUTHORIZATION_FAILED.
    pub const CLUSTER_AUTHORIZATION_FAILED: ErrorCode = ErrorCode::CLUSTER_AUTHORIZATION_FAILED;
    /// UNSUPPORTED_VERSION.
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode::UNSUPPORTED_VERSION;
    /// INVALID_PRODUCER_EPOCH.
    pub const INVALID_PRODUCER_EPOCH: ErrorCode = ErrorCode::INVALID_PRODUCER_EPOCH;
    /// INVALID_TXN_STATE.
    pub const INVALID_TXN_STATE: ErrorCode = ErrorCode::INVALID_TXN_STATE;
    /// CONCURRENT_TRANSACTIONS.
    pub const CONCURRENT_TRANSACTIONS: ErrorCode = ErrorCode::CONCURRENT_TRANSACTIONS;
    /// PRODUCER_FENCED.
    pub const PRODUCER_FENCED: ErrorCode = ErrorCode::PRODUCER_FENCED;
    /// TRANSACTION_ABORTABLE.
    pub const TRANSACTION_ABORTABLE: ErrorCode = ErrorCode::TRANSACTION_ABORTABLE;
    /// UNKNOWN_SERVER_ERROR.
    pub const UNKNOWN_SERVER_ERROR: ErrorCode = ErrorCode::UNKNOWN_SERVER_ERROR;
}

/// The broker's verification settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerificationConfig {
    /// [`VERIFICATION_ENABLE_KEY`]: ask the coordinator before first transactional appends.
    /// Default true, as Kafka.
    pub enable: bool,
    /// How long a positive answer is reused for the same (transactional id, producer id,
    /// epoch, partition) unless a marker for the producer is written first. Default 1 s;
    /// zero keeps nothing. (Kafka keeps no such cache.)
    pub cache_ttl: Duration,
    /// Most positive answers kept at once (default 10 000); when full, new ones are not kept.
    pub cache_capacity: usize,
    /// Bound on finding the coordinator and on one verify call (default 30 s, Kafka's
    /// `request.timeout.ms`); expiry answers NETWORK_EXCEPTION (Produce: NOT_ENOUGH_REPLICAS).
    pub call_timeout: Duration,
}

impl Default for VerificationConfig {
    fn default() -> Self {
        Self {
            enable: true,
            cache_ttl: Duration::from_secs(1),
            cache_capacity: 10_000,
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// A setting value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}={value:?}: {expected}")]
pub struct ConfigError {
    /// The key.
    pub key: String,
    /// The value given.
    pub value: String,
    /// What was expected.
    pub expected: &'static str,
}

impl VerificationConfig {
    /// Applies one `KEY=VALUE` setting; `Ok(false)` if the key is not a verification key.
    /// Today only [`VERIFICATION_ENABLE_KEY`] (`true` or `false`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, ConfigError> {
        if key != VERIFICATION_ENABLE_KEY {
            return Ok(false);
        }
        self.enable = match value.trim() {
            "true" => true,
            "false" => false,
            _ => {
                return Err(ConfigError {
                    key: key.to_owned(),
                    value: value.to_owned(),
                    expected: "true or false",
                });
            }
        };
        Ok(true)
    }

    /// The participant configuration that goes with it: the append-time guard check on
    /// exactly when the broker asks the coordinator.
    pub fn participant(&self, base: ParticipantConfig) -> ParticipantConfig {
        ParticipantConfig {
            transaction_verification: self.enable,
            ..base
        }
    }
}

/// One transaction's question: are these partitions in the ongoing transaction of
/// `transactional_id` at (`producer_id`, `producer_epoch`)?
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VerifyTxn {
    /// The Produce request's transactional id.
    pub transactional_id: String,
    /// The batches' producer id.
    pub producer_id: ProducerId,
    /// The batches' producer epoch.
    pub producer_epoch: ProducerEpoch,
    /// The partitions to verify (or add).
    pub partitions: Vec<TopicPartition>,
    /// Verify (KIP-890 part 1) or add (part 2, a TV2 client's first append).
    pub operation: Operation,
}

/// A transaction coordinator node, as the broker names it: verifications for the same node
/// are merged into one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CoordinatorNode(pub i32);

/// The answer for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// The partition is in the producer's ongoing transaction (verified, or just added by an
    /// [`Operation::Add`]): append.
    Verified,
    /// Not verified, and the append goes ahead anyway, as Kafka does: verification is switched
    /// off, or the coordinator does not support it (AddPartitionsToTxn below v4).
    Skipped,
    /// The partition is not in the producer's ongoing transaction (or there is none): the
    /// late or stray batch of a hanging transaction. Produce: INVALID_TXN_STATE.
    NotInTransaction,
    /// The coordinator answered TRANSACTION_ABORTABLE (120; its verify path's answer for a
    /// partition outside the transaction): as [`Verdict::NotInTransaction`], but a client that
    /// knows the code ([`TxnSupport::GenericError`], [`TxnSupport::AddPartition`]) gets it
    /// as is and aborts its transaction.
    TransactionAbortable,
    /// The coordinator knows a newer epoch. Produce: INVALID_PRODUCER_EPOCH.
    ProducerFenced,
    /// The transaction is completing (PrepareCommit/PrepareAbort). Produce: NOT_ENOUGH_REPLICAS.
    ConcurrentTransactions,
    /// No answer from a coordinator that owns the id (`code` is the coordinator's error, or
    /// NETWORK_EXCEPTION for a failed or timed-out call). Produce: NOT_ENOUGH_REPLICAS.
    CoordinatorUnavailable {
        /// What the coordinator or the call said.
        code: ErrorCode,
    },
    /// Any other error of the coordinator; Produce answers the same code.
    Other {
        /// The coordinator's error.
        code: ErrorCode,
    },
}

impl Verdict {
    /// The verdict for a per-partition error code of a verify-only AddPartitionsToTxn answer
    /// (an [`ErrorCode`] or the `int16` off the wire).
    pub fn from_coordinator_code(code: impl Into<ErrorCode>) -> Self {
        let code = code.into();
        match code {
            ErrorCode::NONE => Self::Verified,
            codes::INVALID_TXN_STATE => Self::NotInTransaction,
            codes::TRANSACTION_ABORTABLE => Self::TransactionAbortable,
            codes::PRODUCER_FENCED | codes::INVALID_PRODUCER_EPOCH => Self::ProducerFenced,
            codes::CONCURRENT_TRANSACTIONS => Self::ConcurrentTransactions,
            codes::NETWORK_EXCEPTION
            | codes::COORDINATOR_LOAD_IN_PROGRESS
            | codes::COORDINATOR_NOT_AVAILABLE
            | codes::NOT_COORDINATOR => Self::CoordinatorUnavailable { code },
            code => Self::Other { code },
        }
    }

    /// Whether the batch may be appended (with its guard).
    pub fn allows_append(self) -> bool {
        matches!(self, Self::Verified | Self::Skipped)
    }

    /// The error code a Produce (v3–v10) answers for the partition; NONE when it may append
    /// ([`Verdict::client_code`] with [`TxnSupport::DefaultError`]).
    pub fn produce_code(self) -> ErrorCode {
        self.client_code(TxnSupport::DefaultError)
    }

    /// The error code the client's request answers for the partition, by what its version
    /// supports (Kafka's `AddPartitionsToTxnManager` and `ReplicaManager` mapping); NONE when
    /// it may append. TRANSACTION_ABORTABLE becomes INVALID_TXN_STATE for
    /// [`TxnSupport::DefaultError`] only; CONCURRENT_TRANSACTIONS stays itself for
    /// [`TxnSupport::AddPartition`] only (NOT_ENOUGH_REPLICAS otherwise).
    pub fn client_code(self, support: TxnSupport) -> ErrorCode {
        match self {
            Self::Verified | Self::Skipped => ErrorCode::NONE,
            Self::NotInTransaction => codes::INVALID_TXN_STATE,
            Self::TransactionAbortable => match support {
                TxnSupport::DefaultError => codes::INVALID_TXN_STATE,
                TxnSupport::GenericError | TxnSupport::AddPartition => codes::TRANSACTION_ABORTABLE,
            },
            Self::ConcurrentTransactions if support == TxnSupport::AddPartition => {
                codes::CONCURRENT_TRANSACTIONS
            }
            Self::ProducerFenced => codes::INVALID_PRODUCER_EPOCH,
            Self::ConcurrentTransactions | Self::CoordinatorUnavailable { .. } => {
                codes::NOT_ENOUGH_REPLICAS
            }
            Self::Other { code } => code,
        }
    }
}

/// Why a whole verify call (or the coordinator lookup) gave no per-partition answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The coordinator does not support verify-only AddPartitionsToTxn: verification is skipped.
    #[error("the coordinator does not support AddPartitionsToTxn v4 (verification skipped)")]
    Unsupported,
    /// No coordinator for the id could be found (`code`, e.g. COORDINATOR_NOT_AVAILABLE).
    #[error("no coordinator available (error {code})")]
    NoCoordinator {
        /// The error.
        code: ErrorCode,
    },
    /// The call failed on the way: connection refused or lost, timeout, undecodable answer.
    #[error("verify call failed: {0}")]
    Network(String),
    /// The answer's top-level error code.
    #[error("the coordinator refused the verify call (error {code})")]
    Refused {
        /// The top-level error.
        code: ErrorCode,
    },
}

impl CallError {
    /// The verdict every partition of a verify call gets.
    pub fn verdict(&self) -> Verdict {
        self.verdict_for(Operation::Verify)
    }

    /// The verdict every partition of the call gets, for `operation`. A coordinator without
    /// broker-form AddPartitionsToTxn skips a verification (as Kafka) but cannot add a
    /// partition: an add gets UNSUPPORTED_VERSION rather than an append outside the
    /// transaction (Kafka appends; a coordinator of a TV2 cluster always has v5).
    pub fn verdict_for(&self, operation: Operation) -> Verdict {
        match self {
            Self::Unsupported if operation == Operation::Add => Verdict::Other {
                code: codes::UNSUPPORTED_VERSION,
            },
            Self::Unsupported => Verdict::Skipped,
            Self::NoCoordinator { code } => Verdict::CoordinatorUnavailable { code: *code },
            Self::Network(_) => Verdict::CoordinatorUnavailable {
                code: codes::NETWORK_EXCEPTION,
            },
            // "The client should not be exposed to CLUSTER_AUTHORIZATION_FAILED" (Kafka).
            Self::Refused {
                code: codes::CLUSTER_AUTHORIZATION_FAILED,
            } => Verdict::NotInTransaction,
            Self::Refused { code } => Verdict::from_coordinator_code(*code),
        }
    }
}

/// What a broker implements to ask its transaction coordinators (over the wire, or in
/// process when it hosts them).
#[async_trait]
pub trait TxnVerifier: Send + Sync {
    /// The node coordinating `transactional_id` (FindCoordinator, or the broker's own
    /// placement of `__transaction_state`).
    async fn coordinator(&self, transactional_id: &str) -> Result<CoordinatorNode, CallError>;

    /// One verify-only AddPartitionsToTxn to `node` for `txns` (distinct transactional ids):
    /// one `Vec` per transaction, in order, with one verdict per partition, in order
    /// ([`verdicts_of`] reads a wire answer so). A shape that does not match counts as
    /// UNKNOWN_SERVER_ERROR for the partitions it misses.
    async fn verify(
        &self,
        node: CoordinatorNode,
        txns: &[VerifyTxn],
    ) -> Result<Vec<Vec<Verdict>>, CallError>;
}

/// The broker-form AddPartitionsToTxn for `txns` (send it at [`request_version`]`(txns)`):
/// `verify_only` for an [`Operation::Verify`], not for an [`Operation::Add`].
pub fn verify_request(txns: &[VerifyTxn]) -> AddPartitionsToTxnRequest {
    let transactions = txns
        .iter()
        .map(|t| {
            let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
            for tp in &t.partitions {
                match topics.iter_mut().find(|x| x.name.0.as_str() == tp.topic) {
                    Some(x) if !x.partitions.contains(&tp.partition) => {
                        x.partitions.push(tp.partition)
                    }
                    Some(_) => {}
                    None => topics.push(
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(StrBytes::from_string(tp.topic.clone())))
                            .with_partitions(vec![tp.partition]),
                    ),
                }
            }
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(
                    t.transactional_id.clone(),
                )))
                .with_producer_id(kafka_protocol::messages::ProducerId(t.producer_id.0))
                .with_producer_epoch(t.producer_epoch.0)
                .with_verify_only(t.operation == Operation::Verify)
                .with_topics(topics)
        })
        .collect();
    AddPartitionsToTxnRequest::default().with_transactions(transactions)
}

/// Reads the coordinator's answer to [`verify_request`]`(txns)`: a top-level error fails the
/// call ([`CallError::Refused`]); otherwise one verdict per partition of each transaction, in
/// order, a partition the answer leaves out counting as UNKNOWN_SERVER_ERROR.
pub fn verdicts_of(
    txns: &[VerifyTxn],
    response: &AddPartitionsToTxnResponse,
) -> Result<Vec<Vec<Verdict>>, CallError> {
    if response.error_code != 0 {
        return Err(CallError::Refused {
            code: response.error_code.into(),
        });
    }
    Ok(txns
        .iter()
        .map(|t| {
            let result = response
                .results_by_transaction
                .iter()
                .find(|r| r.transactional_id.0.as_str() == t.transactional_id);
            t.partitions
                .iter()
                .map(|tp| {
                    result
                        .and_then(|r| {
                            r.topic_results
                                .iter()
                                .filter(|x| x.name.0.as_str() == tp.topic)
                                .flat_map(|x| x.results_by_partition.iter())
                                .find(|p| p.partition_index == tp.partition)
                        })
                        .map_or(
                            Verdict::Other {
                                code: codes::UNKNOWN_SERVER_ERROR,
                            },
                            |p| Verdict::from_coordinator_code(p.partition_error_code),
                        )
                })
                .collect()
        })
        .collect())
}

/// Counters of a [`Verifier`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifierStats {
    /// Calls to [`TxnVerifier::verify`].
    pub calls: u64,
    /// Transactions sent in those calls (more than `calls` when verifications were merged).
    pub transactions_sent: u64,
    /// [`Verifier::verify`] requests that shared a transaction entry already queued.
    pub merged: u64,
    /// Partitions answered from the cache of positive answers.
    pub cache_hits: u64,
    /// Partitions answered `Verified` (cache hits included).
    pub verified: u64,
    /// Partitions refused (any verdict that does not allow the append).
    pub refused: u64,
    /// Transactions sent with [`Operation::Add`] (included in `transactions_sent`).
    pub adds_sent: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    transactional_id: String,
    producer_epoch: ProducerEpoch,
    partition: TopicPartition,
}

struct Waiter {
    partitions: Vec<TopicPartition>,
    reply: oneshot::Sender<Vec<Verdict>>,
}

struct Queued {
    txn: VerifyTxn,
    waiters: Vec<Waiter>,
}

#[derive(Default)]
struct NodeQueue {
    /// A drain task is running for the node (one call in flight at a time).
    busy: bool,
    queued: Vec<Queued>,
}

#[derive(Default)]
struct InFlight {
    calls: usize,
    /// A marker for the producer was written while a call was out: its positive answers
    /// describe a transaction that may have ended, so they are not kept.
    invalidated: bool,
}

#[derive(Default)]
struct State {
    nodes: HashMap<CoordinatorNode, NodeQueue>,
    cache: HashMap<ProducerId, HashMap<CacheKey, Instant>>,
    cached: usize,
    in_flight: HashMap<ProducerId, InFlight>,
    stats: VerifierStats,
}

struct Shared {
    inner: Arc<dyn TxnVerifier>,
    config: VerificationConfig,
    state: Mutex<State>,
}

/// The batching and caching front of a [`TxnVerifier`]; cheap to clone (one shared state).
#[derive(Clone)]
pub struct Verifier {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("config", &self.shared.config)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Takes the producer's call off the in-flight list when the verification ends or is dropped.
struct InFlightGuard<'a> {
    shared: &'a Shared,
    producer_id: ProducerId,
}

impl InFlightGuard<'_> {
    /// Ends the call; whether a marker was written meanwhile.
    fn finish(self) -> bool {
        let invalidated = self.release();
        std::mem::forget(self);
        invalidated
    }

    fn release(&self) -> bool {
        let mut st = self.shared.state.lock();
        let Some(f) = st.in_flight.get_mut(&self.producer_id) else {
            return true;
        };
        let invalidated = f.invalidated;
        f.calls -= 1;
        if f.calls == 0 {
            st.in_flight.remove(&self.producer_id);
        }
        invalidated
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

impl Verifier {
    /// A verifier asking `inner`.
    pub fn new(inner: Arc<dyn TxnVerifier>, config: VerificationConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                inner,
                config,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &VerificationConfig {
        &self.shared.config
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> VerifierStats {
        self.shared.state.lock().stats
    }

    /// Verifies (or, for an [`Operation::Add`], adds) `txn`'s partitions: one verdict per
    /// partition, in order. Partitions with a positive answer still cached are answered at
    /// once (a partition verified or added in this transaction is in it either way); the
    /// others wait for the next call to the id's coordinator node, shared with every other
    /// question for that node that arrives before it leaves (the same transaction asked with
    /// the same operation shares one entry). With verification switched off a verification
    /// is `Skipped`; an add is still made. Needs a tokio runtime (the call runs on a task of
    /// its own, so dropping this future does not cancel it for the others).
    pub async fn verify(&self, txn: VerifyTxn) -> Vec<(TopicPartition, Verdict)> {
        let shared = &self.shared;
        if !shared.config.enable && txn.operation == Operation::Verify {
            return txn
                .partitions
                .into_iter()
                .map(|p| (p, Verdict::Skipped))
                .collect();
        }
        let now = Instant::now();
        let mut answers: Vec<Option<Verdict>> = vec![None; txn.partitions.len()];
        let mut ask: Vec<TopicPartition> = Vec::new();
        {
            let mut st = shared.state.lock();
            for (i, tp) in txn.partitions.iter().enumerate() {
                let key = CacheKey {
                    transactional_id: txn.transactional_id.clone(),
                    producer_epoch: txn.producer_epoch,
                    partition: tp.clone(),
                };
                let hit = st
                    .cache
                    .get(&txn.producer_id)
                    .and_then(|c| c.get(&key))
                    .is_some_and(|expiry| *expiry > now);
                if hit {
                    answers[i] = Some(Verdict::Verified);
                    st.stats.cache_hits += 1;
                } else if !ask.contains(tp) {
                    ask.push(tp.clone());
                }
            }
        }
        if !ask.is_empty() {
            let verdicts = self.ask(&txn, ask.clone()).await;
            for (i, tp) in txn.partitions.iter().enumerate() {
                if answers[i].is_none() {
                    let j = ask.iter().position(|p| p == tp);
                    answers[i] = Some(j.and_then(|j| verdicts.get(j).copied()).unwrap_or(
                        Verdict::Other {
                            code: codes::UNKNOWN_SERVER_ERROR,
                        },
                    ));
                }
            }
        }
        let out: Vec<(TopicPartition, Verdict)> = txn
            .partitions
            .into_iter()
            .zip(answers)
            .map(|(p, v)| {
                (
                    p,
                    v.unwrap_or(Verdict::Other {
                        code: codes::UNKNOWN_SERVER_ERROR,
                    }),
                )
            })
            .collect();
        let mut st = shared.state.lock();
        for (_, v) in &out {
            if *v == Verdict::Verified {
                st.stats.verified += 1;
            } else if !v.allows_append() {
                st.stats.refused += 1;
            }
        }
        out
    }

    /// Asks the coordinator about `partitions` of `txn` (distinct), one verdict each, and keeps
    /// the positive answers.
    async fn ask(&self, txn: &VerifyTxn, partitions: Vec<TopicPartition>) -> Vec<Verdict> {
        let shared = &self.shared;
        let timeout = shared.config.call_timeout;
        let all = |v: Verdict| vec![v; partitions.len()];
        let node =
            match tokio::time::timeout(timeout, shared.inner.coordinator(&txn.transactional_id))
                .await
            {
                Ok(Ok(node)) => node,
                Ok(Err(e)) => return all(e.verdict_for(txn.operation)),
                Err(_) => {
                    return all(Verdict::CoordinatorUnavailable {
                        code: codes::NETWORK_EXCEPTION,
                    });
                }
            };
        let in_flight = InFlightGuard {
            shared,
            producer_id: txn.producer_id,
        };
        let (tx, rx) = oneshot::channel();
        let start_drain = {
            let mut st = shared.state.lock();
            st.in_flight.entry(txn.producer_id).or_default().calls += 1;
            let q = st.nodes.entry(node).or_default();
            let waiter = Waiter {
                partitions: partitions.clone(),
                reply: tx,
            };
            let same = q.queued.iter_mut().find(|e| {
                e.txn.transactional_id == txn.transactional_id
                    && e.txn.producer_id == txn.producer_id
                    && e.txn.producer_epoch == txn.producer_epoch
                    && e.txn.operation == txn.operation
            });
            let merged = same.is_some();
            match same {
                Some(e) => {
                    for p in &partitions {
                        if !e.txn.partitions.contains(p) {
                            e.txn.partitions.push(p.clone());
                        }
                    }
                    e.waiters.push(waiter);
                }
                None => q.queued.push(Queued {
                    txn: VerifyTxn {
                        partitions: partitions.clone(),
                        ..txn.clone()
                    },
                    waiters: vec![waiter],
                }),
            }
            let start = !q.busy;
            q.busy = true;
            if merged {
                st.stats.merged += 1;
            }
            start
        };
        if start_drain {
            tokio::spawn(drain(Arc::clone(shared), node));
        }
        let verdicts = match rx.await {
            Ok(v) => v,
            // The drain task ended without answering (it panicked): no answer.
            Err(_) => all(Verdict::CoordinatorUnavailable {
                code: codes::NETWORK_EXCEPTION,
            }),
        };
        let invalidated = in_flight.finish();
        if !invalidated && !shared.config.cache_ttl.is_zero() {
            let expiry = Instant::now() + shared.config.cache_ttl;
            let mut st = shared.state.lock();
            for (tp, v) in partitions.iter().zip(&verdicts) {
                if *v != Verdict::Verified {
                    continue;
                }
                if st.cached >= shared.config.cache_capacity {
                    purge_expired(&mut st, Instant::now());
                    if st.cached >= shared.config.cache_capacity {
                        break;
                    }
                }
                let key = CacheKey {
                    transactional_id: txn.transactional_id.clone(),
                    producer_epoch: txn.producer_epoch,
                    partition: tp.clone(),
                };
                if st
                    .cache
                    .entry(txn.producer_id)
                    .or_default()
                    .insert(key, expiry)
                    .is_none()
                {
                    st.cached += 1;
                }
            }
        }
        verdicts
    }

    /// A marker for `producer_id` was written on this broker (call it after
    /// `complete_marker`): its cached positive answers are dropped, and those of calls still
    /// out are not kept.
    pub fn marker_written(&self, producer_id: ProducerId) {
        let mut st = self.shared.state.lock();
        if let Some(c) = st.cache.remove(&producer_id) {
            st.cached -= c.len();
        }
        if let Some(f) = st.in_flight.get_mut(&producer_id) {
            f.invalidated = true;
        }
    }

    /// Positive answers kept now (expired ones included until purged).
    pub fn cached(&self) -> usize {
        self.shared.state.lock().cached
    }
}

fn purge_expired(st: &mut State, now: Instant) {
    let mut removed = 0;
    st.cache.retain(|_, c| {
        let before = c.len();
        c.retain(|_, expiry| *expiry > now);
        removed += before - c.len();
        !c.is_empty()
    });
    st.cached -= removed;
}

/// Sends the queued verifications of `node`, one call at a time, until none is left.
async fn drain(shared: Arc<Shared>, node: CoordinatorNode) {
    loop {
        let batch: Vec<Queued> = {
            let mut st = shared.state.lock();
            let q = st.nodes.entry(node).or_default();
            // One entry per transactional id per call (the request is keyed by it); another
            // entry for the same id waits for the next call.
            let mut batch: Vec<Queued> = Vec::new();
            let mut rest = Vec::new();
            for e in q.queued.drain(..) {
                if batch
                    .iter()
                    .any(|b| b.txn.transactional_id == e.txn.transactional_id)
                {
                    rest.push(e);
                } else {
                    batch.push(e);
                }
            }
            q.queued = rest;
            if batch.is_empty() {
                q.busy = false;
                st.nodes.remove(&node);
                return;
            }
            st.stats.calls += 1;
            st.stats.transactions_sent += batch.len() as u64;
            st.stats.adds_sent += batch
                .iter()
                .filter(|e| e.txn.operation == Operation::Add)
                .count() as u64;
            batch
        };
        let txns: Vec<VerifyTxn> = batch.iter().map(|e| e.txn.clone()).collect();
        let result = match tokio::time::timeout(
            shared.config.call_timeout,
            shared.inner.verify(node, &txns),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(CallError::Network("verify call timed out".into())),
        };
        for (i, entry) in batch.into_iter().enumerate() {
            let per_partition: Vec<Verdict> = match &result {
                Ok(all) => {
                    let got = all.get(i);
                    (0..entry.txn.partitions.len())
                        .map(|j| {
                            got.and_then(|v| v.get(j))
                                .copied()
                                .unwrap_or(Verdict::Other {
                                    code: codes::UNKNOWN_SERVER_ERROR,
                                })
                        })
                        .collect()
                }
                Err(e) => vec![e.verdict_for(entry.txn.operation); entry.txn.partitions.len()],
            };
            for w in entry.waiters {
                let mine = w
                    .partitions
                    .iter()
                    .map(|p| {
                        entry
                            .txn
                            .partitions
                            .iter()
                            .position(|q| q == p)
                            .and_then(|j| per_partition.get(j).copied())
                            .unwrap_or(Verdict::Other {
                                code: codes::UNKNOWN_SERVER_ERROR,
                            })
                    })
                    .collect();
                // A waiter that went away (its request was dropped) needs no answer.
                let _ = w.reply.send(mine);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use kafka_protocol::messages::add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
    };
    use tokio::sync::Semaphore;

    use super::*;

    /// A coordinator whose transactions hold the partitions in `members`, keyed by
    /// (transactional id, epoch); every call waits for a permit of `gate` and is recorded.
    struct Script {
        members: Mutex<HashMap<(String, i16), BTreeSet<TopicPartition>>>,
        calls: Mutex<Vec<Vec<VerifyTxn>>>,
        gate: Semaphore,
        lookup: Mutex<Option<CallError>>,
    }

    impl Script {
        fn new(open_gate: bool) -> Arc<Self> {
            Arc::new(Self {
                members: Mutex::new(HashMap::new()),
                calls: Mutex::new(Vec::new()),
                gate: Semaphore::new(if open_gate { Semaphore::MAX_PERMITS } else { 0 }),
                lookup: Mutex::new(None),
            })
        }

        fn add(&self, id: &str, epoch: i16, tp: &TopicPartition) {
            self.members
                .lock()
                .entry((id.to_owned(), epoch))
                .or_default()
                .insert(tp.clone());
        }

        fn end(&self, id: &str, epoch: i16) {
            self.members.lock().remove(&(id.to_owned(), epoch));
        }

        fn calls(&self) -> Vec<Vec<VerifyTxn>> {
            self.calls.lock().clone()
        }
    }

    #[async_trait]
    impl TxnVerifier for Script {
        async fn coordinator(&self, id: &str) -> Result<CoordinatorNode, CallError> {
            if let Some(e) = self.lookup.lock().clone() {
                return Err(e);
            }
            Ok(CoordinatorNode(if id.starts_with("other") { 2 } else { 1 }))
        }

        async fn verify(
            &self,
            _node: CoordinatorNode,
            txns: &[VerifyTxn],
        ) -> Result<Vec<Vec<Verdict>>, CallError> {
            self.calls.lock().push(txns.to_vec());
            let permit = self.gate.acquire().await.expect("gate open");
            permit.forget();
            let mut members = self.members.lock();
            Ok(txns
                .iter()
                .map(|t| {
                    // An add puts the partitions into a transaction the script knows.
                    let set = members.get_mut(&(t.transactional_id.clone(), t.producer_epoch.0));
                    match set {
                        Some(s) if t.operation == Operation::Add => {
                            s.extend(t.partitions.iter().cloned());
                            vec![Verdict::Verified; t.partitions.len()]
                        }
                        Some(s) => t
                            .partitions
                            .iter()
                            .map(|p| {
                                if s.contains(p) {
                                    Verdict::Verified
                                } else {
                                    Verdict::from_coordinator_code(codes::INVALID_TXN_STATE)
                                }
                            })
                            .collect(),
                        None => vec![
                            Verdict::from_coordinator_code(codes::PRODUCER_FENCED);
                            t.partitions.len()
                        ],
                    }
                })
                .collect())
        }
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("orders", p)
    }

    fn txn(id: &str, pid: i64, epoch: i16, parts: &[i32]) -> VerifyTxn {
        VerifyTxn {
            transactional_id: id.to_owned(),
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(epoch),
            partitions: parts.iter().map(|&p| tp(p)).collect(),
            operation: Operation::Verify,
        }
    }

    fn add(id: &str, pid: i64, epoch: i16, parts: &[i32]) -> VerifyTxn {
        VerifyTxn {
            operation: Operation::Add,
            ..txn(id, pid, epoch, parts)
        }
    }

    fn verdicts(out: &[(TopicPartition, Verdict)]) -> Vec<Verdict> {
        out.iter().map(|(_, v)| *v).collect()
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[test]
    fn kafkas_error_mapping_for_the_produce_answer() {
        let table = [
            (0, Verdict::Verified, 0),
            (48, Verdict::NotInTransaction, 48),
            (120, Verdict::TransactionAbortable, 48),
            (90, Verdict::ProducerFenced, 47),
            (47, Verdict::ProducerFenced, 47),
            (51, Verdict::ConcurrentTransactions, 19),
            (
                16,
                Verdict::CoordinatorUnavailable {
                    code: ErrorCode(16),
                },
                19,
            ),
            (
                15,
                Verdict::CoordinatorUnavailable {
                    code: ErrorCode(15),
                },
                19,
            ),
            (
                14,
                Verdict::CoordinatorUnavailable {
                    code: ErrorCode(14),
                },
                19,
            ),
            (
                13,
                Verdict::CoordinatorUnavailable {
                    code: ErrorCode(13),
                },
                19,
            ),
            (
                49,
                Verdict::Other {
                    code: ErrorCode(49),
                },
                49,
            ),
            (
                42,
                Verdict::Other {
                    code: ErrorCode(42),
                },
                42,
            ),
        ];
        for (code, verdict, produce) in table {
            assert_eq!(Verdict::from_coordinator_code(code), verdict, "{code}");
            assert_eq!(
                Verdict::from_coordinator_code(ErrorCode(code)),
                verdict,
                "{code}"
            );
            assert_eq!(verdict.produce_code(), ErrorCode(produce), "{code}");
            assert_eq!(verdict.allows_append(), produce == 0, "{code}");
        }
        assert_eq!(CallError::Unsupported.verdict(), Verdict::Skipped);
        assert!(Verdict::Skipped.allows_append());
        assert_eq!(
            CallError::Network("x".into()).verdict().produce_code(),
            ErrorCode::NOT_ENOUGH_REPLICAS
        );
        assert_eq!(
            CallError::NoCoordinator {
                code: ErrorCode::COORDINATOR_NOT_AVAILABLE
            }
            .verdict()
            .produce_code(),
            ErrorCode::NOT_ENOUGH_REPLICAS
        );
        assert_eq!(
            CallError::Refused {
                code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED
            }
            .verdict()
            .produce_code(),
            ErrorCode::INVALID_TXN_STATE
        );
        assert_eq!(
            CallError::Refused {
                code: ErrorCode::INVALID_REQUEST
            }
            .verdict()
            .produce_code(),
            ErrorCode::INVALID_REQUEST
        );
    }

    #[test]
    fn the_wire_request_and_answer_round_trip() {
        let txns = vec![
            VerifyTxn {
                partitions: vec![tp(0), TopicPartition::new("b", 3), tp(1), tp(0)],
                ..txn("a", 7, 2, &[])
            },
            txn("c", 8, 0, &[5]),
        ];
        let req = verify_request(&txns);
        assert_eq!(req.transactions.len(), 2);
        let a = &req.transactions[0];
        assert!(a.verify_only);
        assert_eq!((a.producer_id.0, a.producer_epoch), (7, 2));
        assert_eq!(a.topics.len(), 2);
        assert_eq!(a.topics[0].partitions, vec![0, 1]);
        // The answer: a's orders-1 missing, c's partition not in its transaction.
        let part = |i, c| {
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(i)
                .with_partition_error_code(c)
        };
        let topic = |n: &str, ps| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(TopicName(StrBytes::from_string(n.to_owned())))
                .with_results_by_partition(ps)
        };
        let result = |id: &str, ts| {
            AddPartitionsToTxnResult::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_owned())))
                .with_topic_results(ts)
        };
        let resp = AddPartitionsToTxnResponse::default().with_results_by_transaction(vec![
            result("c", vec![topic("orders", vec![part(5, 48)])]),
            result(
                "a",
                vec![
                    topic("orders", vec![part(0, 0)]),
                    topic("b", vec![part(3, 51)]),
                ],
            ),
        ]);
        let v = verdicts_of(&txns, &resp).unwrap();
        assert_eq!(
            v[0],
            vec![
                Verdict::Verified,
                Verdict::ConcurrentTransactions,
                Verdict::Other {
                    code: ErrorCode::UNKNOWN_SERVER_ERROR
                },
                Verdict::Verified
            ]
        );
        assert_eq!(v[1], vec![Verdict::NotInTransaction]);
        let refused = resp.clone().with_error_code(31);
        assert_eq!(
            verdicts_of(&txns, &refused),
            Err(CallError::Refused {
                code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED
            })
        );
    }

    #[test]
    fn the_setting_takes_true_or_false() {
        let mut c = VerificationConfig::default();
        assert!(c.enable);
        assert_eq!(c.set(VERIFICATION_ENABLE_KEY, "false"), Ok(true));
        assert!(!c.enable);
        assert!(
            !c.participant(ParticipantConfig::default())
                .transaction_verification
        );
        assert_eq!(c.set("log.flush", "none"), Ok(false));
        assert!(c.set(VERIFICATION_ENABLE_KEY, "yes").is_err());
        assert_eq!(c.set(VERIFICATION_ENABLE_KEY, "true"), Ok(true));
        assert!(
            c.participant(ParticipantConfig::default())
                .transaction_verification
        );
    }

    #[tokio::test(start_paused = true)]
    async fn verifications_for_one_node_are_merged_while_a_call_is_out() {
        let s = Script::new(false);
        s.add("a", 0, &tp(0));
        s.add("b", 0, &tp(1));
        s.add("b", 0, &tp(2));
        s.add("c", 0, &tp(3));
        let v = Verifier::new(s.clone(), VerificationConfig::default());
        let spawn = |t: VerifyTxn| {
            let v = v.clone();
            tokio::spawn(async move { v.verify(t).await })
        };
        let a = spawn(txn("a", 1, 0, &[0]));
        settle().await;
        assert_eq!(s.calls().len(), 1, "the first call leaves at once");
        // While it is out: b twice (same producer and epoch: merged), c, and b at an older
        // epoch (same id: must wait for a call of its own).
        let b1 = spawn(txn("b", 2, 0, &[1]));
        let b2 = spawn(txn("b", 2, 0, &[2, 1]));
        let c = spawn(txn("c", 3, 0, &[3, 4]));
        settle().await;
        let b_old = spawn(txn("b", 2, 1, &[1]));
        settle().await;
        assert_eq!(
            s.calls().len(),
            1,
            "nothing else leaves while one call is out"
        );
        s.gate.add_permits(10);
        assert_eq!(verdicts(&a.await.unwrap()), vec![Verdict::Verified]);
        assert_eq!(verdicts(&b1.await.unwrap()), vec![Verdict::Verified]);
        assert_eq!(
            verdicts(&b2.await.unwrap()),
            vec![Verdict::Verified, Verdict::Verified]
        );
        assert_eq!(
            verdicts(&c.await.unwrap()),
            vec![Verdict::Verified, Verdict::NotInTransaction]
        );
        // Epoch 1 of "b" is unknown to the script: fenced.
        assert_eq!(
            verdicts(&b_old.await.unwrap()),
            vec![Verdict::ProducerFenced]
        );
        let calls = s.calls();
        assert_eq!(calls.len(), 3);
        let ids = |c: &Vec<VerifyTxn>| {
            c.iter()
                .map(|t| (t.transactional_id.clone(), t.partitions.len()))
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&calls[1]), vec![("b".into(), 2), ("c".into(), 2)]);
        assert_eq!(ids(&calls[2]), vec![("b".into(), 1)]);
        let st = v.stats();
        assert_eq!((st.calls, st.transactions_sent, st.merged), (3, 4, 1));
        assert_eq!(st.refused, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn positive_answers_are_reused_until_a_marker_or_their_time_is_up() {
        let s = Script::new(true);
        s.add("a", 0, &tp(0));
        let v = Verifier::new(s.clone(), VerificationConfig::default());
        let ask = |parts: &[i32]| v.verify(txn("a", 1, 0, parts));
        assert_eq!(
            verdicts(&ask(&[0, 1]).await),
            vec![Verdict::Verified, Verdict::NotInTransaction]
        );
        assert_eq!(v.cached(), 1, "only the positive answer is kept");
        // From the cache: no call.
        assert_eq!(verdicts(&ask(&[0]).await), vec![Verdict::Verified]);
        assert_eq!(s.calls().len(), 1);
        assert_eq!(v.stats().cache_hits, 1);
        // Another epoch is another question.
        v.verify(txn("a", 1, 1, &[0])).await;
        assert_eq!(s.calls().len(), 2);
        // The transaction ends: its marker is written here; the next question goes out.
        s.end("a", 0);
        v.marker_written(ProducerId(1));
        assert_eq!(v.cached(), 0);
        assert_eq!(verdicts(&ask(&[0]).await), vec![Verdict::ProducerFenced]);
        assert_eq!(s.calls().len(), 3);
        // Time is up after cache_ttl.
        s.add("a", 0, &tp(0));
        ask(&[0]).await;
        assert_eq!(s.calls().len(), 4);
        tokio::time::advance(Duration::from_millis(999)).await;
        ask(&[0]).await;
        assert_eq!(s.calls().len(), 4);
        tokio::time::advance(Duration::from_millis(2)).await;
        ask(&[0]).await;
        assert_eq!(s.calls().len(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_overtaken_by_a_marker_is_not_kept() {
        let s = Script::new(false);
        s.add("a", 0, &tp(0));
        let v = Verifier::new(s.clone(), VerificationConfig::default());
        let v2 = v.clone();
        let pending = tokio::spawn(async move { v2.verify(txn("a", 1, 0, &[0])).await });
        settle().await;
        // The coordinator said yes, but the marker is written before the answer comes back.
        v.marker_written(ProducerId(1));
        s.gate.add_permits(10);
        assert_eq!(verdicts(&pending.await.unwrap()), vec![Verdict::Verified]);
        assert_eq!(v.cached(), 0);
        v.verify(txn("a", 1, 0, &[0])).await;
        assert_eq!(s.calls().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn no_answer_in_time_or_no_coordinator_is_retriable_for_the_producer() {
        let s = Script::new(false);
        let config = VerificationConfig {
            call_timeout: Duration::from_millis(100),
            ..VerificationConfig::default()
        };
        let v = Verifier::new(s.clone(), config);
        let out = v.verify(txn("a", 1, 0, &[0, 1])).await;
        assert_eq!(
            verdicts(&out),
            vec![
                Verdict::CoordinatorUnavailable {
                    code: ErrorCode::NETWORK_EXCEPTION
                };
                2
            ]
        );
        assert_eq!(out[0].1.produce_code(), ErrorCode::NOT_ENOUGH_REPLICAS);
        *s.lookup.lock() = Some(CallError::NoCoordinator {
            code: ErrorCode::COORDINATOR_NOT_AVAILABLE,
        });
        let out = v.verify(txn("a", 1, 0, &[0])).await;
        assert_eq!(
            out[0].1,
            Verdict::CoordinatorUnavailable {
                code: ErrorCode::COORDINATOR_NOT_AVAILABLE
            }
        );
        assert_eq!(v.stats().refused, 3);
    }

    #[tokio::test]
    async fn switched_off_nothing_is_asked() {
        let s = Script::new(true);
        let config = VerificationConfig {
            enable: false,
            ..VerificationConfig::default()
        };
        let v = Verifier::new(s.clone(), config);
        let out = v.verify(txn("a", 1, 0, &[0])).await;
        assert_eq!(verdicts(&out), vec![Verdict::Skipped]);
        assert!(s.calls().is_empty());
    }

    #[tokio::test]
    async fn different_nodes_are_asked_separately() {
        let s = Script::new(true);
        s.add("a", 0, &tp(0));
        s.add("other", 0, &tp(0));
        let v = Verifier::new(s.clone(), VerificationConfig::default());
        let (x, y) = tokio::join!(
            v.verify(txn("a", 1, 0, &[0])),
            v.verify(txn("other", 2, 0, &[0]))
        );
        assert_eq!(verdicts(&x), vec![Verdict::Verified]);
        assert_eq!(verdicts(&y), vec![Verdict::Verified]);
        assert_eq!(s.calls().len(), 2);
    }

    #[test]
    fn the_request_version_decides_operation_and_error_codes() {
        use TxnSupport::{AddPartition, DefaultError, GenericError};
        for (v, s) in [(3, DefaultError), (10, DefaultError), (11, GenericError)] {
            assert_eq!(TxnSupport::from_produce_version(v), s, "Produce v{v}");
        }
        assert_eq!(TxnSupport::from_produce_version(12), AddPartition);
        assert_eq!(TxnSupport::from_produce_version(13), AddPartition);
        assert_eq!(TxnSupport::from_txn_offset_commit_version(3), DefaultError);
        assert_eq!(TxnSupport::from_txn_offset_commit_version(4), GenericError);
        assert_eq!(TxnSupport::from_txn_offset_commit_version(5), AddPartition);
        assert_eq!(AddPartition.operation(), Operation::Add);
        assert_eq!(GenericError.operation(), Operation::Verify);
        assert_eq!(DefaultError.operation(), Operation::Verify);
        // (verdict, defaultError, genericErrorSupported, addPartition)
        let table = [
            (Verdict::Verified, 0, 0, 0),
            (Verdict::NotInTransaction, 48, 48, 48),
            (Verdict::TransactionAbortable, 48, 120, 120),
            (Verdict::ProducerFenced, 47, 47, 47),
            (Verdict::ConcurrentTransactions, 19, 19, 51),
            (
                Verdict::CoordinatorUnavailable {
                    code: codes::NOT_COORDINATOR,
                },
                19,
                19,
                19,
            ),
        ];
        for (verdict, d, g, a) in table {
            assert_eq!(
                verdict.client_code(DefaultError),
                ErrorCode(d),
                "{verdict:?}"
            );
            assert_eq!(verdict.produce_code(), ErrorCode(d), "{verdict:?}");
            assert_eq!(
                verdict.client_code(GenericError),
                ErrorCode(g),
                "{verdict:?}"
            );
            assert_eq!(
                verdict.client_code(AddPartition),
                ErrorCode(a),
                "{verdict:?}"
            );
        }
        // A coordinator without broker-form AddPartitionsToTxn: a verification is skipped,
        // an add cannot be made.
        assert_eq!(
            CallError::Unsupported.verdict_for(Operation::Verify),
            Verdict::Skipped
        );
        let refused = CallError::Unsupported.verdict_for(Operation::Add);
        assert!(!refused.allows_append());
        assert_eq!(
            refused.client_code(AddPartition),
            codes::UNSUPPORTED_VERSION
        );
    }

    #[test]
    fn an_add_goes_on_the_wire_without_verify_only_at_v5() {
        let txns = vec![add("a", 7, 2, &[0, 1]), txn("b", 8, 0, &[2])];
        let req = verify_request(&txns);
        assert!(!req.transactions[0].verify_only);
        assert!(req.transactions[1].verify_only);
        assert_eq!(request_version(&txns), ADD_VERSION);
        assert_eq!(request_version(&txns[1..]), VERIFY_VERSION);
    }

    #[tokio::test(start_paused = true)]
    async fn adds_are_made_with_verification_off_and_never_merged_with_a_verification() {
        let s = Script::new(true);
        s.add("a", 0, &tp(9));
        let off = VerificationConfig {
            enable: false,
            ..VerificationConfig::default()
        };
        let v = Verifier::new(s.clone(), off);
        assert_eq!(
            verdicts(&v.verify(txn("a", 1, 0, &[0])).await),
            vec![Verdict::Skipped]
        );
        assert!(
            s.calls().is_empty(),
            "a verification that is off asks nothing"
        );
        assert_eq!(
            verdicts(&v.verify(add("a", 1, 0, &[0])).await),
            vec![Verdict::Verified]
        );
        assert_eq!(s.calls().len(), 1, "an add is made all the same");
        assert_eq!(s.calls()[0][0].operation, Operation::Add);
        // Another epoch is fenced; nothing is added.
        assert_eq!(
            verdicts(&v.verify(add("a", 1, 1, &[3])).await),
            vec![Verdict::ProducerFenced]
        );

        // Verification on: a verify and an add of the same transaction, queued while a call
        // is out, go in calls of their own.
        let s = Script::new(false);
        s.add("b", 0, &tp(9));
        let v = Verifier::new(s.clone(), VerificationConfig::default());
        let spawn = |t: VerifyTxn| {
            let v = v.clone();
            tokio::spawn(async move { v.verify(t).await })
        };
        let first = spawn(txn("b", 2, 0, &[1]));
        settle().await;
        let added = spawn(add("b", 2, 0, &[1]));
        settle().await;
        let verified = spawn(txn("b", 2, 0, &[1]));
        settle().await;
        s.gate.add_permits(10);
        assert_eq!(
            verdicts(&first.await.unwrap()),
            vec![Verdict::NotInTransaction]
        );
        assert_eq!(verdicts(&added.await.unwrap()), vec![Verdict::Verified]);
        assert_eq!(verdicts(&verified.await.unwrap()), vec![Verdict::Verified]);
        let ops: Vec<Vec<Operation>> = s
            .calls()
            .iter()
            .map(|c| c.iter().map(|t| t.operation).collect())
            .collect();
        assert_eq!(
            ops,
            vec![
                vec![Operation::Verify],
                vec![Operation::Add],
                vec![Operation::Verify]
            ]
        );
        let st = v.stats();
        assert_eq!((st.calls, st.adds_sent, st.merged), (3, 1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn an_added_partition_is_in_the_transaction_until_a_marker() {
        let s = Script::new(true);
        s.add("a", 0, &tp(9));
        let v = Verifier::new(s.clone(), VerificationConfig::default());
        assert_eq!(
            verdicts(&v.verify(add("a", 1, 0, &[0])).await),
            vec![Verdict::Verified]
        );
        assert_eq!(v.cached(), 1);
        // The same transaction's next append, verified or added, needs no call.
        v.verify(txn("a", 1, 0, &[0])).await;
        v.verify(add("a", 1, 0, &[0])).await;
        assert_eq!(s.calls().len(), 1);
        // The next transaction of a TV2 producer has the next epoch: asked again.
        s.add("a", 1, &tp(9));
        v.verify(add("a", 1, 1, &[0])).await;
        assert_eq!(s.calls().len(), 2);
        // A marker for the producer: nothing cached is used any more.
        v.marker_written(ProducerId(1));
        assert_eq!(v.cached(), 0);
        s.end("a", 0);
        assert_eq!(
            verdicts(&v.verify(txn("a", 1, 0, &[0])).await),
            vec![Verdict::ProducerFenced]
        );
        assert_eq!(s.calls().len(), 3);
    }
}
