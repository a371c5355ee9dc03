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
//! (NOT_ENOUGH_REPLICAS "because it does not trigger a metadata refresh"). Produce v11+ and
//! transaction version 2, where Kafka keeps TRANSACTION_ABORTABLE and CONCURRENT_TRANSACTIONS
//! and lets the broker add the partition itself, are not covered here.

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
use txn_log::{ProducerEpoch, ProducerId, TopicPartition};

use crate::participant::ParticipantConfig;

/// Kafka's broker setting that switches verification on or off (default true).
pub const VERIFICATION_ENABLE_KEY: &str = "transaction.partition.verification.enable";

/// The AddPartitionsToTxn version [`verify_request`] is meant for: the first with
/// `verify_only` (v4; the coordinator answers INVALID_TXN_STATE for a partition outside the
/// transaction, v5 may answer TRANSACTION_ABORTABLE, both read as `NotInTransaction`).
pub const VERIFY_VERSION: i16 = 4;

/// Kafka error codes this module reads or answers.
pub mod codes {
    /// NETWORK_EXCEPTION.
    pub const NETWORK_EXCEPTION: i16 = 13;
    /// COORDINATOR_LOAD_IN_PROGRESS.
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    /// COORDINATOR_NOT_AVAILABLE.
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    /// NOT_COORDINATOR.
    pub const NOT_COORDINATOR: i16 = 16;
    /// NOT_ENOUGH_REPLICAS.
    pub const NOT_ENOUGH_REPLICAS: i16 = 19;
    /// CLUSTER_AUTHORIZATION_FAILED.
    pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
    /// UNSUPPORTED_VERSION.
    pub const UNSUPPORTED_VERSION: i16 = 35;
    /// INVALID_PRODUCER_EPOCH.
    pub const INVALID_PRODUCER_EPOCH: i16 = 47;
    /// INVALID_TXN_STATE.
    pub const INVALID_TXN_STATE: i16 = 48;
    /// CONCURRENT_TRANSACTIONS.
    pub const CONCURRENT_TRANSACTIONS: i16 = 51;
    /// PRODUCER_FENCED.
    pub const PRODUCER_FENCED: i16 = 90;
    /// TRANSACTION_ABORTABLE.
    pub const TRANSACTION_ABORTABLE: i16 = 120;
    /// UNKNOWN_SERVER_ERROR.
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
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
    /// The partitions to verify.
    pub partitions: Vec<TopicPartition>,
}

/// A transaction coordinator node, as the broker names it: verifications for the same node
/// are merged into one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CoordinatorNode(pub i32);

/// The answer for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// The partition is in the producer's ongoing transaction: append.
    Verified,
    /// Not verified, and the append goes ahead anyway, as Kafka does: verification is switched
    /// off, or the coordinator does not support it (AddPartitionsToTxn below v4).
    Skipped,
    /// The partition is not in the producer's ongoing transaction (or there is none): the
    /// late or stray batch of a hanging transaction. Produce: INVALID_TXN_STATE.
    NotInTransaction,
    /// The coordinator knows a newer epoch. Produce: INVALID_PRODUCER_EPOCH.
    ProducerFenced,
    /// The transaction is completing (PrepareCommit/PrepareAbort). Produce: NOT_ENOUGH_REPLICAS.
    ConcurrentTransactions,
    /// No answer from a coordinator that owns the id (`code` is the coordinator's error, or
    /// NETWORK_EXCEPTION for a failed or timed-out call). Produce: NOT_ENOUGH_REPLICAS.
    CoordinatorUnavailable {
        /// What the coordinator or the call said.
        code: i16,
    },
    /// Any other error of the coordinator; Produce answers the same code.
    Other {
        /// The coordinator's error.
        code: i16,
    },
}

impl Verdict {
    /// The verdict for a per-partition error code of a verify-only AddPartitionsToTxn answer.
    pub fn from_coordinator_code(code: i16) -> Self {
        match code {
            0 => Self::Verified,
            codes::INVALID_TXN_STATE | codes::TRANSACTION_ABORTABLE => Self::NotInTransaction,
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

    /// The error code a Produce (v3–v10) answers for the partition; 0 when it may append.
    pub fn produce_code(self) -> i16 {
        match self {
            Self::Verified | Self::Skipped => 0,
            Self::NotInTransaction => codes::INVALID_TXN_STATE,
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
        code: i16,
    },
    /// The call failed on the way: connection refused or lost, timeout, undecodable answer.
    #[error("verify call failed: {0}")]
    Network(String),
    /// The answer's top-level error code.
    #[error("the coordinator refused the verify call (error {code})")]
    Refused {
        /// The top-level error.
        code: i16,
    },
}

impl CallError {
    /// The verdict every partition of the call gets.
    pub fn verdict(&self) -> Verdict {
        match self {
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

/// The verify-only AddPartitionsToTxn (send it at [`VERIFY_VERSION`] or above) for `txns`.
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
                .with_verify_only(true)
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
            code: response.error_code,
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

    /// Verifies `txn`'s partitions: one verdict per partition, in order. Partitions with a
    /// positive answer still cached are answered at once; the others wait for the next call
    /// to the id's coordinator node, shared with every other verification for that node that
    /// arrives before it leaves. Needs a tokio runtime (the call runs on a task of its own,
    /// so dropping this future does not cancel it for the others).
    pub async fn verify(&self, txn: VerifyTxn) -> Vec<(TopicPartition, Verdict)> {
        let shared = &self.shared;
        if !shared.config.enable {
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
                Ok(Err(e)) => return all(e.verdict()),
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
                Err(e) => vec![e.verdict(); entry.txn.partitions.len()],
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
            let members = self.members.lock();
            Ok(txns
                .iter()
                .map(|t| {
                    let set = members.get(&(t.transactional_id.clone(), t.producer_epoch.0));
                    t.partitions
                        .iter()
                        .map(|p| match set {
                            Some(s) if s.contains(p) => Verdict::Verified,
                            Some(_) => Verdict::from_coordinator_code(codes::INVALID_TXN_STATE),
                            None => Verdict::from_coordinator_code(codes::PRODUCER_FENCED),
                        })
                        .collect()
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
            (120, Verdict::NotInTransaction, 48),
            (90, Verdict::ProducerFenced, 47),
            (47, Verdict::ProducerFenced, 47),
            (51, Verdict::ConcurrentTransactions, 19),
            (16, Verdict::CoordinatorUnavailable { code: 16 }, 19),
            (15, Verdict::CoordinatorUnavailable { code: 15 }, 19),
            (14, Verdict::CoordinatorUnavailable { code: 14 }, 19),
            (13, Verdict::CoordinatorUnavailable { code: 13 }, 19),
            (49, Verdict::Other { code: 49 }, 49),
            (42, Verdict::Other { code: 42 }, 42),
        ];
        for (code, verdict, produce) in table {
            assert_eq!(Verdict::from_coordinator_code(code), verdict, "{code}");
            assert_eq!(verdict.produce_code(), produce, "{code}");
            assert_eq!(verdict.allows_append(), produce == 0, "{code}");
        }
        assert_eq!(CallError::Unsupported.verdict(), Verdict::Skipped);
        assert!(Verdict::Skipped.allows_append());
        assert_eq!(CallError::Network("x".into()).verdict().produce_code(), 19);
        assert_eq!(
            CallError::NoCoordinator { code: 15 }
                .verdict()
                .produce_code(),
            19
        );
        assert_eq!(CallError::Refused { code: 31 }.verdict().produce_code(), 48);
        assert_eq!(CallError::Refused { code: 42 }.verdict().produce_code(), 42);
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
                Verdict::Other { code: -1 },
                Verdict::Verified
            ]
        );
        assert_eq!(v[1], vec![Verdict::NotInTransaction]);
        let refused = resp.clone().with_error_code(31);
        assert_eq!(
            verdicts_of(&txns, &refused),
            Err(CallError::Refused { code: 31 })
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
            vec![Verdict::CoordinatorUnavailable { code: 13 }; 2]
        );
        assert_eq!(out[0].1.produce_code(), 19);
        *s.lookup.lock() = Some(CallError::NoCoordinator { code: 15 });
        let out = v.verify(txn("a", 1, 0, &[0])).await;
        assert_eq!(out[0].1, Verdict::CoordinatorUnavailable { code: 15 });
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
}
