//! Markers applied in process, in the participant's own types: what a broker that hosts the
//! coordinator implements ([`MarkerApplier`]) instead of a `WriteTxnMarkers` handler.
//!
//! The marker writer speaks `WriteTxnMarkers` (one request per broker, many transactions and
//! partitions in it). For a broker applying markers to its own partitions, this module does the
//! conversion once: the request becomes one `(TopicPartition, Marker)` per partition, with the
//! marker's [`TxnVersion`] (`WriteTxnMarkers` v2's `TransactionVersion`; v1 cannot carry it),
//! and the
//! broker's typed answers ([`ApplyError`]) become the response's error codes, which the writer
//! then reads with Kafka's rules (retry, done, fenced). The same functions serve a broker's wire
//! `WriteTxnMarkers` handler: [`markers_of`] then [`response_of`], or [`apply_request`].
//!
//! ```
//! # #[cfg(feature = "net")] {
//! use markers::apply::{ApplyError, MarkerApplier};
//! use markers::participant::{Marker, PartitionState};
//! use txn_log::TopicPartition;
//!
//! struct Broker { /* partitions, each with its PartitionState and log, under a lock */ }
//!
//! #[markers::async_trait]
//! impl MarkerApplier for Broker {
//!     async fn apply_markers(&self, markers: Vec<(TopicPartition, Marker)>) -> Vec<Result<(), ApplyError>> {
//!         // Per entry, under the partition's lock: check_marker, append the control batch,
//!         // complete_marker; then make the appends durable and advance the high watermark.
//!         markers.iter().map(|_| Err(ApplyError::NotLeader)).collect()
//!     }
//! }
//! # }
//! ```

use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TopicPartition, TxnResult};

use crate::ErrorCode;
use crate::participant::{Marker, MarkerError, TxnVersion};

/// Why a marker was not applied to its partition. Each maps to the error code Kafka's broker
/// answers ([`ApplyError::code`]), which decides what the marker writer does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// This broker does not lead the partition (any more). `NOT_LEADER_OR_FOLLOWER` (6): the
    /// writer looks the leader up again and retries.
    #[error("not the leader of the partition")]
    NotLeader,
    /// This broker does not know the partition. `UNKNOWN_TOPIC_OR_PARTITION` (3): retried after
    /// a fresh leader lookup (a deleted topic ends when the lookup says so).
    #[error("unknown topic or partition")]
    UnknownPartition,
    /// The participant refused the marker ([`crate::participant::PartitionState::check_marker`]):
    /// its code (`INVALID_PRODUCER_EPOCH` and `TRANSACTION_COORDINATOR_FENCED` fence the
    /// decision; `INVALID_REQUEST` is retried and counted as unexpected).
    #[error(transparent)]
    Rejected(#[from] MarkerError),
    /// Writing or syncing the control batch failed. `KAFKA_STORAGE_ERROR` (56): retried.
    #[error("storage error: {0}")]
    Storage(String),
    /// Any other Kafka error code (e.g. `NOT_ENOUGH_REPLICAS`, 19, from a replicated log).
    #[error("error code {0}")]
    Code(ErrorCode),
}

impl ApplyError {
    /// The Kafka error code of the partition's `WriteTxnMarkers` result.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::NotLeader => ErrorCode::NOT_LEADER_OR_FOLLOWER,
            Self::UnknownPartition => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            Self::Rejected(e) => e.code(),
            Self::Storage(_) => ErrorCode::KAFKA_STORAGE_ERROR,
            Self::Code(c) => *c,
        }
    }
}

impl From<&ApplyError> for ErrorCode {
    fn from(e: &ApplyError) -> Self {
        e.code()
    }
}

/// What a broker hosting the coordinator implements to apply markers to the partitions it
/// leads (the participant side of `WriteTxnMarkers`, without the message).
#[cfg(feature = "net")]
#[async_trait::async_trait]
pub trait MarkerApplier: Send + Sync {
    /// Applies every marker to its partition and answers one result per entry, in order
    /// (a missing answer counts as `UNKNOWN_SERVER_ERROR`, retried). Answer `Ok` only once the
    /// control batch is as durable as acknowledged produce data: the coordinator then writes
    /// `CompleteCommit`/`CompleteAbort` and never sends this marker again. One call carries the
    /// markers of many transactions, so the log can be synced once per partition.
    async fn apply_markers(
        &self,
        markers: Vec<(TopicPartition, Marker)>,
    ) -> Vec<Result<(), ApplyError>>;
}

/// One `(partition, marker)` per partition of every marker of `request`, in request order.
/// Each marker's transaction version is `txn_versions[i]` (parallel to `request.markers`, what
/// the in-process transport hands over) if given, else the marker's `transaction_version`
/// field: what a v2 request carries (KIP-1228), 0 (TV0) when decoded from v1.
pub fn markers_of(
    request: &WriteTxnMarkersRequest,
    txn_versions: &[TxnVersion],
) -> Vec<(TopicPartition, Marker)> {
    let mut out = Vec::new();
    for (i, m) in request.markers.iter().enumerate() {
        let txn_version = txn_versions
            .get(i)
            .copied()
            .unwrap_or(TxnVersion(m.transaction_version));
        let marker = Marker {
            producer_id: ProducerId(m.producer_id.0),
            producer_epoch: ProducerEpoch(m.producer_epoch),
            coordinator_epoch: CoordinatorEpoch(m.coordinator_epoch),
            result: if m.transaction_result {
                TxnResult::Commit
            } else {
                TxnResult::Abort
            },
            txn_version,
        };
        for t in &m.topics {
            for &p in &t.partition_indexes {
                out.push((TopicPartition::new(t.name.0.as_str(), p), marker));
            }
        }
    }
    out
}

/// The `WriteTxnMarkersResponse` of `request` whose partitions, in [`markers_of`]'s order, got
/// `results` (a missing result is `UNKNOWN_SERVER_ERROR`).
pub fn response_of(
    request: &WriteTxnMarkersRequest,
    results: &[Result<(), ApplyError>],
) -> WriteTxnMarkersResponse {
    let mut results = results.iter();
    crate::writer::build_response(request, |_, _, _| match results.next() {
        Some(Ok(())) => ErrorCode::NONE,
        Some(Err(e)) => e.code(),
        None => ErrorCode::UNKNOWN_SERVER_ERROR,
    })
}

/// Applies `request` through `applier` and answers it: [`markers_of`], then
/// [`MarkerApplier::apply_markers`], then [`response_of`]. Also what a broker's wire
/// `WriteTxnMarkers` handler can call (with no `txn_versions`: the request's own fields).
#[cfg(feature = "net")]
pub async fn apply_request(
    applier: &dyn MarkerApplier,
    request: &WriteTxnMarkersRequest,
    txn_versions: &[TxnVersion],
) -> WriteTxnMarkersResponse {
    let results = applier
        .apply_markers(markers_of(request, txn_versions))
        .await;
    response_of(request, &results)
}

/// The marker writer's transport to a [`MarkerApplier`]: every request, whatever broker it is
/// addressed to, is applied in process. Alone for a single broker; behind
/// [`crate::writer::RoutingTransport`] for this node's share of a cluster.
#[cfg(feature = "net")]
#[derive(Clone)]
pub struct ApplierTransport {
    applier: std::sync::Arc<dyn MarkerApplier>,
}

#[cfg(feature = "net")]
impl std::fmt::Debug for ApplierTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApplierTransport").finish_non_exhaustive()
    }
}

#[cfg(feature = "net")]
impl ApplierTransport {
    /// Delivers to `applier`.
    pub fn new(applier: std::sync::Arc<dyn MarkerApplier>) -> Self {
        Self { applier }
    }
}

#[cfg(feature = "net")]
#[async_trait::async_trait]
impl crate::writer::MarkerTransport for ApplierTransport {
    async fn write_markers(
        &self,
        _broker: &crate::writer::BrokerEndpoint,
        request: WriteTxnMarkersRequest,
    ) -> Result<WriteTxnMarkersResponse, crate::writer::TransportError> {
        Ok(apply_request(self.applier.as_ref(), &request, &[]).await)
    }

    async fn write_markers_versioned(
        &self,
        _broker: &crate::writer::BrokerEndpoint,
        request: WriteTxnMarkersRequest,
        txn_versions: Vec<TxnVersion>,
    ) -> Result<WriteTxnMarkersResponse, crate::writer::TransportError> {
        Ok(apply_request(self.applier.as_ref(), &request, &txn_versions).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };
    use kafka_protocol::protocol::StrBytes;

    fn request() -> WriteTxnMarkersRequest {
        let marker = |pid: i64, commit: bool, topics: &[(&str, &[i32])]| {
            WritableTxnMarker::default()
                .with_producer_id(kafka_protocol::messages::ProducerId(pid))
                .with_producer_epoch(3)
                .with_coordinator_epoch(7)
                .with_transaction_result(commit)
                .with_topics(
                    topics
                        .iter()
                        .map(|(n, ps)| {
                            WritableTxnMarkerTopic::default()
                                .with_name(TopicName(StrBytes::from_string((*n).to_owned())))
                                .with_partition_indexes(ps.to_vec())
                        })
                        .collect(),
                )
        };
        WriteTxnMarkersRequest::default().with_markers(vec![
            marker(10, true, &[("a", &[0, 1]), ("b", &[4])]),
            marker(11, false, &[("a", &[2])]),
        ])
    }

    #[test]
    fn a_request_becomes_one_marker_per_partition_and_back() {
        let r = request();
        let entries = markers_of(&r, &[TxnVersion::V2]);
        let tps: Vec<String> = entries.iter().map(|(tp, _)| tp.to_string()).collect();
        assert_eq!(tps.len(), 4);
        let first = entries[0].1;
        assert_eq!(first.producer_id, ProducerId(10));
        assert_eq!(first.producer_epoch, ProducerEpoch(3));
        assert_eq!(first.coordinator_epoch, CoordinatorEpoch(7));
        assert_eq!(first.result, TxnResult::Commit);
        assert_eq!(first.txn_version, TxnVersion::V2);
        let last = entries[3].1;
        assert_eq!(
            (last.producer_id, last.result),
            (ProducerId(11), TxnResult::Abort)
        );
        assert_eq!(last.txn_version, TxnVersion::V0, "no version given: TV0");
        assert_eq!(entries[3].0, TopicPartition::new("a", 2));

        let response = response_of(
            &r,
            &[
                Ok(()),
                Err(ApplyError::NotLeader),
                Err(ApplyError::Storage("disk".into())),
            ],
        );
        let codes: Vec<(i64, String, i32, ErrorCode)> = response
            .markers
            .iter()
            .flat_map(|m| {
                m.topics.iter().flat_map(move |t| {
                    t.partitions.iter().map(move |p| {
                        (
                            m.producer_id.0,
                            t.name.0.to_string(),
                            p.partition_index,
                            ErrorCode::from(p.error_code),
                        )
                    })
                })
            })
            .collect();
        assert_eq!(
            codes,
            vec![
                (10, "a".into(), 0, ErrorCode::NONE),
                (10, "a".into(), 1, ErrorCode::NOT_LEADER_OR_FOLLOWER),
                (10, "b".into(), 4, ErrorCode::KAFKA_STORAGE_ERROR),
                (11, "a".into(), 2, ErrorCode::UNKNOWN_SERVER_ERROR),
            ]
        );
    }

    /// Without `txn_versions` (a broker's wire handler), each marker's version is the
    /// request's `transaction_version` (v2; 0 when decoded from v1); given ones win.
    #[test]
    fn the_request_field_gives_the_version_when_none_is_handed_over() {
        let mut r = request();
        r.markers[0].transaction_version = 2;
        r.markers[1].transaction_version = 1;
        let tvs: Vec<TxnVersion> = markers_of(&r, &[])
            .iter()
            .map(|(_, m)| m.txn_version)
            .collect();
        assert_eq!(
            tvs,
            [
                TxnVersion::V2,
                TxnVersion::V2,
                TxnVersion::V2,
                TxnVersion::V1
            ]
        );
        let given = markers_of(&r, &[TxnVersion::V0]);
        assert_eq!(given[0].1.txn_version, TxnVersion::V0);
        assert_eq!(given[3].1.txn_version, TxnVersion::V1);
    }

    #[test]
    fn a_refusal_by_the_participant_keeps_its_code() {
        let e = ApplyError::from(MarkerError::CoordinatorFenced {
            producer_id: ProducerId(1),
            marker_coordinator_epoch: CoordinatorEpoch(1),
            current_coordinator_epoch: CoordinatorEpoch(2),
        });
        assert_eq!(e.code(), ErrorCode::TRANSACTION_COORDINATOR_FENCED);
        assert_eq!(
            ErrorCode::from(&e),
            ErrorCode::TRANSACTION_COORDINATOR_FENCED
        );
        let zombie = crate::participant::ProduceError::InvalidProducerEpoch {
            producer_id: ProducerId(1),
            batch_epoch: ProducerEpoch(0),
            current_epoch: ProducerEpoch(1),
        };
        assert_eq!(ErrorCode::from(&zombie), ErrorCode::INVALID_PRODUCER_EPOCH);
        assert_eq!(zombie.response_error().code(), 47);
        assert_eq!(ApplyError::UnknownPartition.code(), 3);
        assert_eq!(ApplyError::Code(ErrorCode::NOT_ENOUGH_REPLICAS).code(), 19);
    }

    /// The one name table (`txn_log::ErrorCode`) agrees with kafka-protocol's generated one
    /// (Kafka's `Errors.java`) on every code it names: the name and whether it is retriable.
    #[test]
    fn error_code_table_agrees_with_kafka_protocol() {
        use kafka_protocol::ResponseError;
        for &code in ErrorCode::KNOWN {
            let name = code.name().expect("named");
            let Some(theirs) = ResponseError::try_from_code(code.code()) else {
                assert_eq!(code, ErrorCode::NONE);
                continue;
            };
            let camel: String = name
                .split('_')
                .map(|w| {
                    let mut cs = w.chars();
                    cs.next().map_or(String::new(), |c| {
                        c.to_string() + &cs.as_str().to_ascii_lowercase()
                    })
                })
                .collect();
            assert_eq!(format!("{theirs:?}"), camel, "{code}");
            assert_eq!(code.is_retriable(), theirs.is_retriable(), "{code}");
        }
    }
}
