//! Transactional client steps over any [`KafkaConnection`] (plaintext or secured), each bounded:
//! InitProducerId, AddPartitionsToTxn and EndTxn retried while the coordinator answers a
//! retriable error, FindCoordinator, and the read_committed view of a partition.

use std::time::Duration;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, BrokerId, EndTxnRequest, FetchRequest, FindCoordinatorRequest,
    InitProducerIdRequest, MetadataRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::records::RecordBatchDecoder;
use markers::wire::KafkaConnection;
use tokio::io::{AsyncRead, AsyncWrite};

use txn_testkit::wire::sb;

/// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
/// CONCURRENT_TRANSACTIONS: the answers a transactional client retries.
const RETRIABLE: [i16; 4] = [14, 15, 16, 51];

/// Runs `step` (which returns an error code) until the code is not retriable, at most 100
/// times 100 ms apart; returns that code. Panics naming `what` when every attempt was
/// retriable.
pub async fn until_not_retriable(what: &str, mut step: impl AsyncFnMut() -> i16) -> i16 {
    for _ in 0..100 {
        let e = step().await;
        if !RETRIABLE.contains(&e) {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: still retriable after 100 attempts")
}

/// The port of the coordinator `c` names for `key` (`key_type` 0: group, 1: transaction).
pub async fn coordinator_port<S: AsyncRead + AsyncWrite + Unpin>(
    c: &mut KafkaConnection<S>,
    key_type: i8,
    key: &str,
) -> u16 {
    let fc = c
        .call(
            &FindCoordinatorRequest::default()
                .with_key_type(key_type)
                .with_key(sb(key)),
            2,
        )
        .await
        .expect("find coordinator");
    assert_eq!(fc.error_code, 0, "FindCoordinator({key})");
    u16::try_from(fc.port).expect("port")
}

/// The leader of each partition of `t` (Metadata v12), asserted to include nodes 1 and 2: the
/// two-node cluster tests' topic spans both.
pub async fn leaders_on_both_nodes<S: AsyncRead + AsyncWrite + Unpin>(
    c: &mut KafkaConnection<S>,
) -> Vec<i32> {
    let md = c
        .call(&MetadataRequest::default().with_topics(None), 12)
        .await
        .expect("metadata");
    let leaders: Vec<i32> = md.topics[0]
        .partitions
        .iter()
        .map(|p| p.leader_id.0)
        .collect();
    assert!(
        leaders.contains(&1) && leaders.contains(&2),
        "t spans both nodes: {leaders:?}"
    );
    leaders
}

/// InitProducerId (at `version`) for a new producer of `txn_id` at its coordinator `tc`,
/// retried while retriable; returns (producer id, epoch).
pub async fn init_producer<S: AsyncRead + AsyncWrite + Unpin>(
    tc: &mut KafkaConnection<S>,
    txn_id: &str,
    version: i16,
) -> (i64, i16) {
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(sb(txn_id))))
        .with_transaction_timeout_ms(30_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let mut got = (0, 0);
    let e = until_not_retriable("InitProducerId", async || {
        let r = tc.call(&init, version).await.expect("init");
        got = (r.producer_id.0, r.producer_epoch);
        r.error_code
    })
    .await;
    assert_eq!(e, 0, "InitProducerId({txn_id})");
    got
}

/// AddPartitionsToTxn (v3) of `t`'s `partitions` to `txn_id`'s transaction of `producer`
/// (id, epoch), retried while retriable.
pub async fn add_partitions<S: AsyncRead + AsyncWrite + Unpin>(
    tc: &mut KafkaConnection<S>,
    txn_id: &str,
    producer: (i64, i16),
    partitions: Vec<i32>,
) {
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(sb(txn_id)))
        .with_v3_and_below_producer_id(ProducerId(producer.0))
        .with_v3_and_below_producer_epoch(producer.1)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(sb("t")))
                .with_partitions(partitions),
        ]);
    let e = until_not_retriable("AddPartitionsToTxn", async || {
        let r = tc.call(&add, 3).await.expect("add partitions");
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    })
    .await;
    assert_eq!(e, 0, "AddPartitionsToTxn({txn_id})");
}

/// EndTxn (at `version`) of `txn_id`'s transaction of `producer` (id, epoch), retried while
/// retriable; returns the answer's (producer id, epoch).
pub async fn end_txn<S: AsyncRead + AsyncWrite + Unpin>(
    tc: &mut KafkaConnection<S>,
    txn_id: &str,
    producer: (i64, i16),
    commit: bool,
    version: i16,
) -> (i64, i16) {
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(sb(txn_id)))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_committed(commit);
    let mut answered = (0, 0);
    let e = until_not_retriable("EndTxn", async || {
        let r = tc.call(&end, version).await.expect("end txn");
        answered = (r.producer_id.0, r.producer_epoch);
        r.error_code
    })
    .await;
    assert_eq!(e, 0, "EndTxn({txn_id})");
    answered
}

/// What a read_committed fetch of a stable partition returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The data records' values, in offset order.
    pub values: Vec<String>,
    /// The producer ids the broker lists as aborted.
    pub aborted: Vec<i64>,
}

/// A Fetch (v4 and up, no waiting, 1 MiB) of `t`/`partition` from `offset`, read_committed or
/// read_uncommitted.
pub fn fetch_of_t(partition: i32, offset: i64, read_committed: bool) -> FetchRequest {
    fetch_of("t", partition, offset, read_committed)
}

/// A Fetch (v4 and up, no waiting, 1 MiB) of `topic`/`partition` from `offset`, read_committed
/// or read_uncommitted.
pub fn fetch_of(topic: &str, partition: i32, offset: i64, read_committed: bool) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(i8::from(read_committed))
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(sb(topic)))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ])
}

/// A read_committed fetch of `t`/`partition` from offset 0, polled (100 times, 100 ms apart)
/// until the partition is stable up to a non-empty high watermark. Panics with the last
/// (last stable offset, high watermark) when it never is.
pub async fn stable_read<S: AsyncRead + AsyncWrite + Unpin>(
    c: &mut KafkaConnection<S>,
    partition: i32,
) -> Committed {
    let req = fetch_of_t(partition, 0, true);
    let mut last = None;
    for _ in 0..100 {
        let resp = c.call(&req, 11).await.expect("fetch");
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        if p.last_stable_offset == p.high_watermark && p.high_watermark > 0 {
            let mut values = Vec::new();
            let mut buf = p.records.clone().unwrap_or_default();
            for set in RecordBatchDecoder::decode_all(&mut buf).expect("records") {
                for r in set.records.iter().filter(|r| !r.control) {
                    let value = r.value.as_deref().unwrap_or_default();
                    values.push(String::from_utf8_lossy(value).into_owned());
                }
            }
            let aborted = p
                .aborted_transactions
                .iter()
                .flatten()
                .map(|a| a.producer_id.0)
                .collect();
            return Committed { values, aborted };
        }
        last = Some((p.last_stable_offset, p.high_watermark));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("t-{partition} never became stable (LSO, HW) {last:?}: no marker")
}
