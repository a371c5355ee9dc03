//! Plain wire helpers for tests that drive a broker request by request: a connection without
//! negotiation, record batches and Produce.

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use markers::wire::KafkaConnection;
use tokio::net::{TcpStream, ToSocketAddrs};

/// A client connection to a broker.
pub type Conn = KafkaConnection<TcpStream>;

/// A kafka-protocol string.
pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// Connects to `addr` as client `client_id`.
pub async fn connect(addr: impl ToSocketAddrs, client_id: &str) -> Conn {
    let s = TcpStream::connect(addr).await.expect("connect");
    KafkaConnection::new(s, client_id)
}

/// A v2 record batch of `values` (offsets from 0); producer `(pid, epoch, base sequence)`
/// (transactional or idempotent) or plain.
pub fn record_batch(
    producer: Option<(i64, i16, i32)>,
    transactional: bool,
    values: &[String],
) -> Bytes {
    let (pid, epoch, seq) = producer.unwrap_or((-1, -1, -1));
    let records: Vec<Record> = (0..)
        .zip(values)
        .map(|(i, v)| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i64::from(i),
            // the encoder splits batches where `offset - sequence` changes: a plain batch
            // (base sequence -1) numbers its records -1, 0, 1, ...
            sequence: seq.wrapping_add(i),
            timestamp: 1_700_000_000_000 + i64::from(i),
            key: None,
            value: Some(Bytes::from(v.clone())),
            headers: IndexMap::new(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode");
    buf.freeze()
}

/// Produces `records` (acks all, v9) to `topic`/`partition`, in `txn_id`'s transaction if
/// given; returns (error_code, base_offset).
pub async fn produce(
    c: &mut Conn,
    topic: &str,
    partition: i32,
    records: Bytes,
    txn_id: Option<&str>,
) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_transactional_id(txn_id.map(|t| TransactionalId(sb(t))))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(sb(topic)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records)),
                ]),
        ]);
    let resp = c.call(&req, 9).await.expect("produce");
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}
