//! Seed inputs of each harness, made by the production encoders (kafka-protocol's request
//! encoders, the txn-log codec, the participant's data and control batch encoders).

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{self as km, ApiKey, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes, encode_request_header_into_buffer};
use markers::participant::{ControlBatch, DataBatch, RecordTimestamps};
use txn_log::{
    CoordinatorEpoch, LogPartition, ProducerEpoch, ProducerId, TopicPartition, TransactionalId,
    TxnRecord, TxnResult, TxnState, codec,
};

use crate::{StoredEntry, StoredLog};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// One request frame with its length prefix.
fn frame<R: Encodable>(key: ApiKey, version: i16, correlation_id: i32, body: &R) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(s("seed")));
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    encode_request_header_into_buffer(&mut buf, &header).expect("header");
    body.encode(&mut buf, version).expect("body");
    let len = i32::try_from(buf.len() - 4).expect("small");
    buf[..4].copy_from_slice(&len.to_be_bytes());
    buf.to_vec()
}

fn data_batch(pid: i64, epoch: i16, seq: i32, transactional: bool, values: &[&str]) -> Bytes {
    DataBatch {
        producer_id: ProducerId(pid),
        producer_epoch: ProducerEpoch(epoch),
        base_sequence: seq,
        transactional,
        partition_leader_epoch: 0,
        timestamps: RecordTimestamps::Ascending(1_700_000_000_000),
        ..DataBatch::default()
    }
    .encode(values.iter().enumerate().map(|(i, v)| {
        (
            Some(Bytes::from(format!("k{i}"))),
            Some(Bytes::copy_from_slice(v.as_bytes())),
        )
    }))
    .expect("batch")
}

fn produce_request(batch: Bytes) -> km::ProduceRequest {
    km::ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_transactional_id(Some(s("app").into()))
        .with_topic_data(vec![
            km::produce_request::TopicProduceData::default()
                .with_name(s("t").into())
                .with_partition_data(vec![
                    km::produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch)),
                ]),
        ])
}

/// Request-frame seeds: whole TV1 and TV2 transactions on one connection, each API the daemon
/// serves, the KIP-511 fallback and a refused API.
pub fn request_frame() -> Vec<(&'static str, Vec<u8>)> {
    let init = km::InitProducerIdRequest::default()
        .with_transactional_id(Some(s("app").into()))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(km::ProducerId(-1))
        .with_producer_epoch(-1);
    let add_v3 = km::AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(s("app").into())
        .with_v3_and_below_producer_id(km::ProducerId(0))
        .with_v3_and_below_producer_epoch(0)
        .with_v3_and_below_topics(vec![
            km::add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(s("t").into())
                .with_partitions(vec![0, 1]),
        ]);
    let add_v4 = km::AddPartitionsToTxnRequest::default().with_transactions(vec![
        km::add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
            .with_transactional_id(s("app").into())
            .with_producer_id(km::ProducerId(0))
            .with_producer_epoch(0)
            .with_verify_only(true)
            .with_topics(vec![
                km::add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(s("t").into())
                    .with_partitions(vec![0]),
            ]),
    ]);
    let add_offsets = km::AddOffsetsToTxnRequest::default()
        .with_transactional_id(s("app").into())
        .with_producer_id(km::ProducerId(0))
        .with_producer_epoch(0)
        .with_group_id(s("g").into());
    let end = |committed: bool| {
        km::EndTxnRequest::default()
            .with_transactional_id(s("app").into())
            .with_producer_id(km::ProducerId(0))
            .with_producer_epoch(0)
            .with_committed(committed)
    };
    let describe = km::DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![s("app").into(), s("other").into()]);
    let list = km::ListTransactionsRequest::default()
        .with_state_filters(vec![s("Ongoing"), s("Bogus")])
        .with_producer_id_filters(vec![km::ProducerId(0)])
        .with_duration_filter(0);
    let metadata = km::MetadataRequest::default().with_topics(Some(vec![
        km::metadata_request::MetadataRequestTopic::default().with_name(Some(s("t").into())),
    ]));
    let find = km::FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(vec![s("app")]);
    let find_v1 = km::FindCoordinatorRequest::default()
        .with_key(s("app"))
        .with_key_type(1);
    let fetch = km::FetchRequest::default().with_topics(vec![
        km::fetch_request::FetchTopic::default()
            .with_topic(s("t").into())
            .with_partitions(vec![
                km::fetch_request::FetchPartition::default().with_partition(0),
            ]),
    ]);
    let batch = data_batch(0, 0, 0, true, &["a", "b"]);

    // A whole transaction on one connection (TV1: EndTxn v3).
    let mut txn = Vec::new();
    txn.extend(frame(
        ApiKey::ApiVersions,
        3,
        1,
        &km::ApiVersionsRequest::default()
            .with_client_software_name(s("seed"))
            .with_client_software_version(s("1")),
    ));
    txn.extend(frame(ApiKey::FindCoordinator, 4, 2, &find));
    txn.extend(frame(ApiKey::InitProducerId, 4, 3, &init));
    txn.extend(frame(ApiKey::AddPartitionsToTxn, 3, 4, &add_v3));
    txn.extend(frame(ApiKey::AddOffsetsToTxn, 3, 5, &add_offsets));
    txn.extend(frame(ApiKey::DescribeTransactions, 0, 6, &describe));
    txn.extend(frame(ApiKey::ListTransactions, 1, 7, &list));
    txn.extend(frame(ApiKey::EndTxn, 3, 8, &end(true)));
    txn.extend(frame(ApiKey::InitProducerId, 4, 9, &init));
    // TV2-shaped: AddPartitions v4 (verify only), EndTxn v5 abort.
    let mut tv2 = Vec::new();
    tv2.extend(frame(ApiKey::InitProducerId, 5, 1, &init));
    tv2.extend(frame(ApiKey::AddPartitionsToTxn, 5, 2, &add_v4));
    tv2.extend(frame(ApiKey::AddPartitionsToTxn, 3, 3, &add_v3));
    tv2.extend(frame(ApiKey::EndTxn, 5, 4, &end(false)));
    tv2.extend(frame(ApiKey::EndTxn, 5, 5, &end(false)));
    vec![
        ("txn-tv1", txn),
        ("txn-tv2", tv2),
        ("metadata-v12", frame(ApiKey::Metadata, 12, 1, &metadata)),
        ("metadata-v0", frame(ApiKey::Metadata, 0, 1, &metadata)),
        ("find-v1", frame(ApiKey::FindCoordinator, 1, 1, &find_v1)),
        (
            "apiversions-v9",
            frame(
                ApiKey::ApiVersions,
                4,
                1,
                &km::ApiVersionsRequest::default(),
            )
            .into_iter()
            .enumerate()
            // version 4 -> 9: the KIP-511 fallback
            .map(|(i, b)| if i == 7 { 9 } else { b })
            .collect(),
        ),
        (
            "produce-v3",
            frame(ApiKey::Produce, 3, 1, &produce_request(batch.clone())),
        ),
        (
            "produce-v9-acks0",
            frame(ApiKey::Produce, 9, 1, &produce_request(batch).with_acks(0)),
        ),
        ("fetch-v12", frame(ApiKey::Fetch, 12, 1, &fetch)),
        (
            "heartbeat-unsupported",
            frame(ApiKey::Heartbeat, 4, 1, &km::HeartbeatRequest::default()),
        ),
    ]
}

fn record(state: TxnState, parts: &[(&str, i32)]) -> TxnRecord {
    TxnRecord {
        last_producer_epoch: ProducerEpoch(2),
        state,
        partitions: parts
            .iter()
            .map(|&(t, p)| TopicPartition::new(t, p))
            .collect(),
        txn_start_ms: 1_699_999_990_000,
        client_txn_version: txn_log::TxnVersion::V2,
        ..TxnRecord::initialized(
            ProducerId(1000),
            ProducerEpoch(3),
            60_000,
            1_699_999_995_000,
        )
    }
}

/// Stored-log seeds: raw entries as `SledTxnLog` writes them, on one and two partitions, and
/// sealed payloads.
pub fn txn_log_record() -> Vec<(&'static str, Vec<u8>)> {
    let p0 = LogPartition(0);
    let ekey = codec::epoch_key(p0);
    let raw = |key: Vec<u8>, value: Vec<u8>| StoredEntry { tag: 0, key, value };
    let mut raw_entries = vec![
        raw(
            ekey.to_vec(),
            codec::encode_epoch(&ekey, CoordinatorEpoch(4)).unwrap(),
        ),
        raw(
            codec::PRODUCER_ID_KEY.to_vec(),
            codec::encode_next_producer_id(5000).unwrap(),
        ),
    ];
    let mut sealed_entries = Vec::new();
    // Two-phase commit (KIP-939): a transaction kept by a session of the same producer id, and
    // one ended by a session of a new producer id, completing.
    let kept = |state, session: (i64, i16)| TxnRecord {
        two_phase_commit: true,
        timeout_ms: i32::MAX,
        session_producer_id: ProducerId(session.0),
        session_producer_epoch: ProducerEpoch(session.1),
        ..record(state, &[("t", 2)])
    };
    let records = [
        ("app", record(TxnState::Ongoing, &[("t", 0), ("t", 1)])),
        ("prep", record(TxnState::PrepareCommit, &[("t", 0)])),
        ("abort", record(TxnState::PrepareAbort, &[("u", 3)])),
        ("done", record(TxnState::CompleteCommit, &[])),
        ("idle", record(TxnState::Empty, &[])),
        ("kept", kept(TxnState::Ongoing, (1000, 4))),
        ("kept-new", kept(TxnState::PrepareCommit, (1001, 1))),
    ];
    for (id, rec) in records {
        let key = codec::record_key(p0, &TransactionalId::new(id).unwrap());
        let value = codec::encode_record(&key, &rec).unwrap();
        // The payload alone, for sealed mode: tag 6 = kind R, version 2.
        let payload = value[6..value.len() - 4].to_vec();
        sealed_entries.push(StoredEntry {
            tag: 6,
            key: key.clone(),
            value: payload,
        });
        raw_entries.push(raw(key, value));
    }
    sealed_entries.push(StoredEntry {
        tag: 4,
        key: ekey.to_vec(),
        value: vec![8],
    });
    sealed_entries.push(StoredEntry {
        tag: 5,
        key: codec::PRODUCER_ID_KEY.to_vec(),
        value: vec![0xfb, 0x88, 0x13],
    });
    // Two partitions: the records' keys name partition 0 wherever their ids hash.
    vec![
        (
            "raw",
            StoredLog {
                sealed: false,
                partitions: 1,
                entries: raw_entries.clone(),
            }
            .encode(),
        ),
        (
            "raw-2p",
            StoredLog {
                sealed: false,
                partitions: 2,
                entries: raw_entries,
            }
            .encode(),
        ),
        (
            "sealed",
            StoredLog {
                sealed: true,
                partitions: 1,
                entries: sealed_entries,
            }
            .encode(),
        ),
    ]
}

/// Record-batch seeds: transactional, idempotent and control batches, and partition logs with
/// a commit and an abort.
pub fn record_batch() -> Vec<(&'static str, Vec<u8>)> {
    let txn = data_batch(7, 3, 0, true, &["v0", "v1", "v2"]);
    let idem = data_batch(9, 0, 5, false, &["i0"]);
    let mut marker = ControlBatch {
        producer_id: ProducerId(7),
        producer_epoch: ProducerEpoch(3),
        coordinator_epoch: CoordinatorEpoch(1),
        result: TxnResult::Commit,
        base_offset: 3,
        partition_leader_epoch: 0,
        timestamp_ms: 1_700_000_000_100,
    }
    .encode()
    .unwrap()
    .to_vec();
    // The log as the broker stores it: base offsets assigned in order.
    let mut idem_at_4 = idem.to_vec();
    idem_at_4[..8].copy_from_slice(&4i64.to_be_bytes());
    let mut log = txn.to_vec();
    log.extend_from_slice(&marker);
    log.extend_from_slice(&idem_at_4);
    let with = |flags: u8, b: &[u8]| {
        let mut v = vec![flags];
        v.extend_from_slice(b);
        v
    };
    let abort = {
        marker[..8].copy_from_slice(&3i64.to_be_bytes());
        let mut m = ControlBatch::decode(&Bytes::from(marker.clone())).unwrap();
        m.result = TxnResult::Abort;
        m.encode().unwrap().to_vec()
    };
    let mut aborted_log = txn.to_vec();
    aborted_log.extend_from_slice(&abort);
    vec![
        ("txn", with(0, &txn)),
        ("idempotent", with(0, &idem)),
        ("control", with(0, &marker)),
        ("log", with(0, &log)),
        ("log-fixcrc", with(1, &log)),
        ("aborted-fixcrc", with(1, &aborted_log)),
    ]
}
