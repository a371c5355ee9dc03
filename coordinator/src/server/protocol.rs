//! The daemon's protocol surface: the advertised API table, and conversions between the
//! `kafka-protocol` messages and the engine's typed requests and responses. Every response is
//! built for the request's version (the encoder refuses fields a version does not have).

use std::borrow::Cow;
use std::collections::BTreeMap;

use kafka_protocol::messages::{self as km, ApiKey, ResponseKind};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use txn_log::{ProducerEpoch, ProducerId, TopicPartition, TxnVersion};

use crate::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    AddPartitionsTxn, DescribeTransactionsRequest, DescribedTxn, EndTxnRequest, EndTxnResponse,
    ErrorCode, InitProducerIdRequest, InitProducerIdResponse, ListTransactionsRequest,
    ListTransactionsResponse, TransactionalIdPattern,
};

/// The APIs and versions this daemon serves (what ApiVersions advertises).
///
/// Produce and Fetch are listed because librdkafka enables its MsgVer2 feature (needed by
/// idempotent and transactional producers) only for brokers that advertise Produce ≥ v3 and
/// Fetch ≥ v4. The daemon leads no data partition, so it answers both with
/// NOT_LEADER_OR_FOLLOWER for every partition, as a Kafka broker that is not the leader does.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 10),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::InitProducerId, 0, 6),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    // Kafka's admin APIs for ACLs and SCRAM credentials (`kafka-acls.sh`, `kafka-configs.sh`):
    // the versions Kafka 4.1 serves.
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // No quotas: an empty answer, for `kafka-configs.sh --describe --entity-type users`.
    (ApiKey::DescribeClientQuotas, 0, 1),
    // Answered on SASL listeners before authentication, ILLEGAL_SASL_STATE elsewhere; listed
    // everywhere, as Kafka lists them.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// The version range served for `key`, if any.
pub fn supported(key: ApiKey) -> Option<VersionRange> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, min, max)| VersionRange { min, max })
}

/// Kafka's name of `key`, as the metrics label it: borrowed (no allocation) for the APIs in
/// [`SUPPORTED`], formatted for the others (answered UNSUPPORTED_VERSION, rare).
pub fn api_name(key: ApiKey) -> Cow<'static, str> {
    Cow::Borrowed(match key {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::Metadata => "Metadata",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::AddPartitionsToTxn => "AddPartitionsToTxn",
        ApiKey::AddOffsetsToTxn => "AddOffsetsToTxn",
        ApiKey::EndTxn => "EndTxn",
        ApiKey::DescribeTransactions => "DescribeTransactions",
        ApiKey::ListTransactions => "ListTransactions",
        ApiKey::DescribeAcls => "DescribeAcls",
        ApiKey::CreateAcls => "CreateAcls",
        ApiKey::DeleteAcls => "DeleteAcls",
        ApiKey::DescribeUserScramCredentials => "DescribeUserScramCredentials",
        ApiKey::AlterUserScramCredentials => "AlterUserScramCredentials",
        ApiKey::DescribeClientQuotas => "DescribeClientQuotas",
        ApiKey::SaslHandshake => "SaslHandshake",
        ApiKey::SaslAuthenticate => "SaslAuthenticate",
        other => return Cow::Owned(format!("{other:?}")),
    })
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// The feature name Kafka's clients read to choose their transaction version.
pub const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";

/// The highest `transaction.version` this coordinator serves (2: KIP-890 part 2's EndTxn v5).
pub const MAX_TRANSACTION_VERSION: i16 = 2;

/// The epoch of the daemon's finalized features: 0, the lowest there is. A Kafka client takes
/// the finalized features of the node with the highest epoch, so brokers that advertise
/// features (Kafka 2.7 and later, whose epoch is a metadata offset; refbroker, epoch 1)
/// decide the cluster's transaction version, and this daemon's only counts with brokers that
/// advertise none. A client must not choose TV2 (no AddPartitionsToTxn: the broker adds the
/// partition) on the coordinator's word when the brokers cannot add partitions themselves.
pub const FINALIZED_FEATURES_EPOCH: i64 = 0;

/// The ApiVersions response (`error` is UNSUPPORTED_VERSION for the KIP-511 fallback, which is
/// always encoded as v0). From v3 it carries the features as Kafka's broker does:
/// `transaction.version` supported 0 to 2, and finalized at `transaction_version` (the
/// `transaction.version` key; a level of 0 is not listed, as Kafka lists no feature at 0) with
/// [`FINALIZED_FEATURES_EPOCH`].
pub fn api_versions_response(
    error: ErrorCode,
    transaction_version: TxnVersion,
) -> km::ApiVersionsResponse {
    let level = transaction_version.level().min(MAX_TRANSACTION_VERSION);
    let finalized = if level > 0 {
        vec![
            km::api_versions_response::FinalizedFeatureKey::default()
                .with_name(s(TRANSACTION_VERSION_FEATURE))
                .with_min_version_level(level)
                .with_max_version_level(level),
        ]
    } else {
        Vec::new()
    };
    km::ApiVersionsResponse::default()
        .with_supported_features(vec![
            km::api_versions_response::SupportedFeatureKey::default()
                .with_name(s(TRANSACTION_VERSION_FEATURE))
                .with_min_version(0)
                .with_max_version(MAX_TRANSACTION_VERSION),
        ])
        .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
        .with_finalized_features(finalized)
        .with_error_code(error.0)
        .with_api_keys(
            SUPPORTED
                .iter()
                .map(|&(k, min, max)| {
                    km::api_versions_response::ApiVersion::default()
                        .with_api_key(k as i16)
                        .with_min_version(min)
                        .with_max_version(max)
                })
                .collect(),
        )
}

// ===== requests =====

/// InitProducerId request.
pub fn init_producer_id(version: i16, r: &km::InitProducerIdRequest) -> InitProducerIdRequest {
    InitProducerIdRequest {
        version,
        transactional_id: r.transactional_id.as_ref().map(|t| t.0.to_string()),
        transaction_timeout_ms: r.transaction_timeout_ms,
        producer_id: ProducerId(r.producer_id.0),
        producer_epoch: ProducerEpoch(r.producer_epoch),
        enable_2pc: r.enable_2_pc,
        keep_prepared_txn: r.keep_prepared_txn,
    }
}

fn topics_to_partitions(
    topics: &[km::add_partitions_to_txn_request::AddPartitionsToTxnTopic],
) -> Vec<TopicPartition> {
    topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| TopicPartition::new(t.name.0.to_string(), *p))
        })
        .collect()
}

/// AddPartitionsToTxn request (v0-3: the single client transaction; v4+: the batch).
pub fn add_partitions(
    version: i16,
    r: &km::AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnRequest {
    let transactions = if version < 4 {
        vec![AddPartitionsTxn {
            transactional_id: r.v3_and_below_transactional_id.0.to_string(),
            producer_id: ProducerId(r.v3_and_below_producer_id.0),
            producer_epoch: ProducerEpoch(r.v3_and_below_producer_epoch),
            verify_only: false,
            partitions: topics_to_partitions(&r.v3_and_below_topics),
        }]
    } else {
        r.transactions
            .iter()
            .map(|t| AddPartitionsTxn {
                transactional_id: t.transactional_id.0.to_string(),
                producer_id: ProducerId(t.producer_id.0),
                producer_epoch: ProducerEpoch(t.producer_epoch),
                verify_only: t.verify_only,
                partitions: topics_to_partitions(&t.topics),
            })
            .collect()
    };
    AddPartitionsToTxnRequest {
        version,
        transactions,
    }
}

/// AddOffsetsToTxn request.
pub fn add_offsets(version: i16, r: &km::AddOffsetsToTxnRequest) -> AddOffsetsToTxnRequest {
    AddOffsetsToTxnRequest {
        version,
        transactional_id: r.transactional_id.0.to_string(),
        producer_id: ProducerId(r.producer_id.0),
        producer_epoch: ProducerEpoch(r.producer_epoch),
        group_id: r.group_id.0.to_string(),
    }
}

/// EndTxn request.
pub fn end_txn(version: i16, r: &km::EndTxnRequest) -> EndTxnRequest {
    EndTxnRequest {
        version,
        transactional_id: r.transactional_id.0.to_string(),
        producer_id: ProducerId(r.producer_id.0),
        producer_epoch: ProducerEpoch(r.producer_epoch),
        committed: r.committed,
    }
}

/// DescribeTransactions request.
pub fn describe(r: &km::DescribeTransactionsRequest) -> DescribeTransactionsRequest {
    DescribeTransactionsRequest {
        transactional_ids: r
            .transactional_ids
            .iter()
            .map(|t| t.0.to_string())
            .collect(),
    }
}

/// ListTransactions request; INVALID_REGULAR_EXPRESSION for a v2 `TransactionalIdPattern`
/// that does not compile.
pub fn list(
    version: i16,
    r: &km::ListTransactionsRequest,
) -> Result<ListTransactionsRequest, ErrorCode> {
    let transactional_id_pattern = match &r.transactional_id_pattern {
        Some(p) if version >= 2 && !p.is_empty() => Some(TransactionalIdPattern::new(p)?),
        _ => None,
    };
    Ok(ListTransactionsRequest {
        state_filters: r.state_filters.iter().map(|s| s.to_string()).collect(),
        producer_id_filters: r
            .producer_id_filters
            .iter()
            .map(|p| ProducerId(p.0))
            .collect(),
        duration_filter_ms: if version >= 1 { r.duration_filter } else { -1 },
        transactional_id_pattern,
    })
}

// ===== responses =====

/// InitProducerId response for `version` (the kept transaction's pair from v6 on).
pub fn init_producer_id_response(version: i16, r: InitProducerIdResponse) -> ResponseKind {
    let mut out = km::InitProducerIdResponse::default()
        .with_error_code(r.error.0)
        .with_producer_id(km::ProducerId(r.producer_id.0))
        .with_producer_epoch(r.producer_epoch.0);
    if version >= 6 {
        out = out
            .with_ongoing_txn_producer_id(km::ProducerId(r.ongoing_txn_producer_id.0))
            .with_ongoing_txn_producer_epoch(r.ongoing_txn_producer_epoch.0);
    }
    ResponseKind::InitProducerId(out)
}

fn topic_results(
    parts: &[(TopicPartition, ErrorCode)],
) -> Vec<km::add_partitions_to_txn_response::AddPartitionsToTxnTopicResult> {
    use km::add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };
    let mut order: Vec<String> = Vec::new();
    let mut by_topic: BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> = BTreeMap::new();
    for (tp, e) in parts {
        if !by_topic.contains_key(&tp.topic) {
            order.push(tp.topic.clone());
        }
        by_topic.entry(tp.topic.clone()).or_default().push(
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(tp.partition)
                .with_partition_error_code(e.0),
        );
    }
    order
        .into_iter()
        .map(|t| {
            let results = by_topic.remove(&t).unwrap_or_default();
            AddPartitionsToTxnTopicResult::default()
                .with_name(km::TopicName(s(&t)))
                .with_results_by_partition(results)
        })
        .collect()
}

/// AddPartitionsToTxn response for `version`.
pub fn add_partitions_response(version: i16, r: &AddPartitionsToTxnResponse) -> ResponseKind {
    let mut out = km::AddPartitionsToTxnResponse::default();
    if version < 4 {
        let parts: Vec<_> = r
            .results
            .first()
            .map(|t| t.partitions.clone())
            .unwrap_or_default();
        out.results_by_topic_v3_and_below = topic_results(&parts);
    } else {
        out.error_code = r.error.0;
        out.results_by_transaction = r
            .results
            .iter()
            .map(|t| {
                km::add_partitions_to_txn_response::AddPartitionsToTxnResult::default()
                    .with_transactional_id(km::TransactionalId(s(&t.transactional_id)))
                    .with_topic_results(topic_results(&t.partitions))
            })
            .collect();
    }
    ResponseKind::AddPartitionsToTxn(out)
}

/// AddOffsetsToTxn response.
pub fn add_offsets_response(e: ErrorCode) -> ResponseKind {
    ResponseKind::AddOffsetsToTxn(km::AddOffsetsToTxnResponse::default().with_error_code(e.0))
}

/// EndTxn response for `version` (v5+ carries the producer id and epoch).
pub fn end_txn_response(version: i16, r: EndTxnResponse) -> ResponseKind {
    let mut out = km::EndTxnResponse::default().with_error_code(r.error.0);
    if version >= 5 {
        out.producer_id = km::ProducerId(r.producer_id.0);
        out.producer_epoch = r.producer_epoch.0;
    }
    ResponseKind::EndTxn(out)
}

/// DescribeTransactions response.
pub fn describe_response(list: &[DescribedTxn]) -> ResponseKind {
    use km::describe_transactions_response::{TopicData, TransactionState};
    let states = list
        .iter()
        .map(|d| {
            let mut topics: Vec<TopicData> = Vec::new();
            for tp in &d.partitions {
                match topics.iter_mut().find(|t| t.topic.0.as_str() == tp.topic) {
                    Some(t) => t.partitions.push(tp.partition),
                    None => topics.push(
                        TopicData::default()
                            .with_topic(km::TopicName(s(&tp.topic)))
                            .with_partitions(vec![tp.partition]),
                    ),
                }
            }
            TransactionState::default()
                .with_error_code(d.error.0)
                .with_transactional_id(km::TransactionalId(s(&d.transactional_id)))
                .with_transaction_state(s(d.state.map_or("", |st| st.name())))
                .with_transaction_timeout_ms(d.timeout_ms)
                .with_transaction_start_time_ms(d.start_time_ms)
                .with_producer_id(km::ProducerId(d.producer_id.0))
                .with_producer_epoch(d.producer_epoch.0)
                .with_topics(topics)
        })
        .collect();
    ResponseKind::DescribeTransactions(
        km::DescribeTransactionsResponse::default().with_transaction_states(states),
    )
}

/// ListTransactions response.
pub fn list_response(r: &ListTransactionsResponse) -> ResponseKind {
    use km::list_transactions_response::TransactionState;
    ResponseKind::ListTransactions(
        km::ListTransactionsResponse::default()
            .with_error_code(r.error.0)
            .with_unknown_state_filters(r.unknown_state_filters.iter().map(|f| s(f)).collect())
            .with_transaction_states(
                r.transactions
                    .iter()
                    .map(|t| {
                        TransactionState::default()
                            .with_transactional_id(km::TransactionalId(s(&t.transactional_id)))
                            .with_producer_id(km::ProducerId(t.producer_id.0))
                            .with_transaction_state(s(t.state.name()))
                    })
                    .collect(),
            ),
    )
}

/// ListTransactions answered by a node that coordinates no transactional id: nothing listed,
/// the unknown state filters echoed, and a v2 pattern that does not compile refused as the
/// coordinator refuses it.
pub fn list_response_owning_nothing(version: i16, r: &km::ListTransactionsRequest) -> ResponseKind {
    let (error, unknown_state_filters) = match list(version, r) {
        Ok(req) => (
            ErrorCode::NONE,
            crate::unknown_state_filters(&req.state_filters),
        ),
        Err(error) => (error, Vec::new()),
    };
    list_response(&ListTransactionsResponse {
        error,
        unknown_state_filters,
        transactions: Vec::new(),
    })
}

/// Produce: this node leads nothing; every partition gets NOT_LEADER_OR_FOLLOWER.
pub fn produce_response(r: &km::ProduceRequest) -> ResponseKind {
    use km::produce_response::{PartitionProduceResponse, TopicProduceResponse};
    let responses = r
        .topic_data
        .iter()
        .map(|t| {
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| {
                            PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(ErrorCode::NOT_LEADER_OR_FOLLOWER.0)
                        })
                        .collect(),
                )
        })
        .collect();
    ResponseKind::Produce(km::ProduceResponse::default().with_responses(responses))
}

/// Fetch: this node leads nothing; every partition gets NOT_LEADER_OR_FOLLOWER.
pub fn fetch_response(r: &km::FetchRequest) -> ResponseKind {
    use km::fetch_response::{FetchableTopicResponse, PartitionData};
    let responses = r
        .topics
        .iter()
        .map(|t| {
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            PartitionData::default()
                                .with_partition_index(p.partition)
                                .with_error_code(ErrorCode::NOT_LEADER_OR_FOLLOWER.0)
                        })
                        .collect(),
                )
        })
        .collect();
    ResponseKind::Fetch(km::FetchResponse::default().with_responses(responses))
}

/// A response to an API or version we do not serve: the API's default response with its
/// top-level error code set to UNSUPPORTED_VERSION where it has one, encodable at `version`.
/// `None` if we cannot build one (the connection is then closed).
pub fn unsupported_response(key: ApiKey, version: i16) -> Option<ResponseKind> {
    let codec = key.valid_versions();
    if version < codec.min || version > codec.max {
        return None;
    }
    let e = ErrorCode::UNSUPPORTED_VERSION.0;
    macro_rules! with_error {
        ($($variant:ident => $ty:ty),* $(,)?) => {
            match key {
                $(ApiKey::$variant => {
                    // The top-level error code does not exist in every version.
                    let with = ResponseKind::$variant(<$ty>::default().with_error_code(e));
                    if with.encode(&mut bytes::BytesMut::new(), version).is_ok() {
                        Some(with)
                    } else {
                        Some(ResponseKind::$variant(<$ty>::default()))
                    }
                })*
                ApiKey::Produce => Some(ResponseKind::Produce(km::ProduceResponse::default())),
                ApiKey::ListOffsets => Some(ResponseKind::ListOffsets(km::ListOffsetsResponse::default())),
                ApiKey::Metadata => Some(ResponseKind::Metadata(km::MetadataResponse::default())),
                ApiKey::OffsetCommit => Some(ResponseKind::OffsetCommit(km::OffsetCommitResponse::default())),
                ApiKey::TxnOffsetCommit => Some(ResponseKind::TxnOffsetCommit(km::TxnOffsetCommitResponse::default())),
                ApiKey::WriteTxnMarkers => Some(ResponseKind::WriteTxnMarkers(km::WriteTxnMarkersResponse::default())),
                ApiKey::CreateTopics => Some(ResponseKind::CreateTopics(km::CreateTopicsResponse::default())),
                ApiKey::DeleteTopics => Some(ResponseKind::DeleteTopics(km::DeleteTopicsResponse::default())),
                ApiKey::DescribeConfigs => Some(ResponseKind::DescribeConfigs(km::DescribeConfigsResponse::default())),
                ApiKey::DescribeGroups => Some(ResponseKind::DescribeGroups(km::DescribeGroupsResponse::default())),
                ApiKey::DescribeTransactions => Some(ResponseKind::DescribeTransactions(km::DescribeTransactionsResponse::default())),
                _ => None,
            }
        };
    }
    let out = with_error!(
        Fetch => km::FetchResponse,
        FindCoordinator => km::FindCoordinatorResponse,
        JoinGroup => km::JoinGroupResponse,
        Heartbeat => km::HeartbeatResponse,
        LeaveGroup => km::LeaveGroupResponse,
        SyncGroup => km::SyncGroupResponse,
        ListGroups => km::ListGroupsResponse,
        SaslHandshake => km::SaslHandshakeResponse,
        ApiVersions => km::ApiVersionsResponse,
        InitProducerId => km::InitProducerIdResponse,
        AddOffsetsToTxn => km::AddOffsetsToTxnResponse,
        EndTxn => km::EndTxnResponse,
        AddPartitionsToTxn => km::AddPartitionsToTxnResponse,
        ListTransactions => km::ListTransactionsResponse,
        SaslAuthenticate => km::SaslAuthenticateResponse,
        DescribeCluster => km::DescribeClusterResponse,
        OffsetFetch => km::OffsetFetchResponse,
    );
    out.filter(|r| r.encode(&mut bytes::BytesMut::new(), version).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_advertises_the_transaction_version_feature_as_kafka() {
        use bytes::BytesMut;
        use kafka_protocol::protocol::{Decodable, Encodable};
        let round = |r: km::ApiVersionsResponse, v: i16| {
            let mut b = BytesMut::new();
            r.encode(&mut b, v).expect("encode");
            km::ApiVersionsResponse::decode(&mut b.freeze(), v).expect("decode")
        };
        for level in [1i8, 2] {
            let r = round(api_versions_response(ErrorCode::NONE, TxnVersion(level)), 3);
            assert_eq!(r.supported_features.len(), 1);
            let f = &r.supported_features[0];
            assert_eq!(
                (f.name.as_str(), f.min_version, f.max_version),
                ("transaction.version", 0, 2)
            );
            assert_eq!(r.finalized_features_epoch, FINALIZED_FEATURES_EPOCH);
            let f = &r.finalized_features[0];
            assert_eq!(
                (f.name.as_str(), f.min_version_level, f.max_version_level),
                ("transaction.version", i16::from(level), i16::from(level))
            );
        }
        // level 0 is not listed as finalized, as Kafka lists no feature at 0
        let r = round(api_versions_response(ErrorCode::NONE, TxnVersion::V0), 3);
        assert!(r.finalized_features.is_empty());
        assert_eq!(r.supported_features.len(), 1);
        // before v3 there are no features on the wire
        let r = round(api_versions_response(ErrorCode::NONE, TxnVersion::V2), 2);
        assert!(r.supported_features.is_empty() && r.finalized_features.is_empty());
        assert_eq!(r.finalized_features_epoch, -1);
    }

    #[test]
    fn advertised_ranges_are_within_the_codec() {
        for &(k, min, max) in SUPPORTED {
            let c = k.valid_versions();
            assert!(min >= c.min && max <= c.max, "{k:?} {min}-{max} vs {c:?}");
        }
    }

    #[test]
    fn every_served_api_has_a_borrowed_metrics_name() {
        for &(k, _, _) in SUPPORTED {
            let name = api_name(k);
            assert!(
                matches!(name, Cow::Borrowed(_)),
                "{k:?} allocates its label"
            );
            assert_eq!(name, format!("{k:?}"));
        }
        assert_eq!(api_name(ApiKey::JoinGroup), "JoinGroup");
    }

    #[test]
    fn init_producer_id_v6_carries_the_two_phase_commit_flags() {
        let r = km::InitProducerIdRequest::default()
            .with_enable_2_pc(true)
            .with_keep_prepared_txn(true);
        let req = init_producer_id(6, &r);
        assert!(req.enable_2pc && req.keep_prepared_txn);
        let req = init_producer_id(5, &km::InitProducerIdRequest::default());
        assert!(!req.enable_2pc && !req.keep_prepared_txn);
    }

    #[test]
    fn responses_encode_at_every_advertised_version() {
        use bytes::BytesMut;
        let ok = ErrorCode::NONE;
        let apt = AddPartitionsToTxnResponse {
            error: ok,
            results: vec![crate::AddPartitionsTxnResult {
                transactional_id: "t".into(),
                partitions: vec![
                    (TopicPartition::new("a", 0), ok),
                    (TopicPartition::new("a", 1), ok),
                ],
            }],
        };
        for v in 0..=5 {
            let mut b = BytesMut::new();
            add_partitions_response(v, &apt)
                .encode(&mut b, v)
                .expect("add partitions");
            let mut b = BytesMut::new();
            let r = EndTxnResponse {
                error: ok,
                producer_id: ProducerId(5),
                producer_epoch: ProducerEpoch(2),
            };
            end_txn_response(v, r).encode(&mut b, v).expect("end txn");
            let mut b = BytesMut::new();
            let r = InitProducerIdResponse {
                ongoing_txn_producer_id: ProducerId(5),
                ongoing_txn_producer_epoch: ProducerEpoch(1),
                ..InitProducerIdResponse::ok(ProducerId(5), ProducerEpoch(2))
            };
            init_producer_id_response(v, r)
                .encode(&mut b, v)
                .expect("init");
        }
        let mut b = BytesMut::new();
        let r = InitProducerIdResponse::ok(ProducerId(5), ProducerEpoch(2));
        init_producer_id_response(6, r)
            .encode(&mut b, 6)
            .expect("init v6");
        for v in 0..=4 {
            let mut b = BytesMut::new();
            ResponseKind::ApiVersions(api_versions_response(ok, TxnVersion::V2))
                .encode(&mut b, v)
                .expect("api versions");
        }
        for v in 0..=1 {
            let mut b = BytesMut::new();
            list_response(&ListTransactionsResponse {
                error: ok,
                unknown_state_filters: vec!["x".into()],
                transactions: vec![],
            })
            .encode(&mut b, v)
            .expect("list");
        }
    }

    #[test]
    fn unsupported_responses_exist_for_common_apis() {
        for key in [
            ApiKey::JoinGroup,
            ApiKey::Heartbeat,
            ApiKey::CreateTopics,
            ApiKey::OffsetCommit,
        ] {
            let v = key.valid_versions().max;
            let r = unsupported_response(key, v).expect("buildable");
            let mut b = bytes::BytesMut::new();
            r.encode(&mut b, v).expect("encodes");
        }
        assert!(unsupported_response(ApiKey::Heartbeat, 999).is_none());
    }
}
