//! Plain wire helpers for tests that drive a broker request by request: a connection without
//! negotiation, calls bounded by a deadline, record batches and Produce.

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName, TransactionalId};
use kafka_protocol::protocol::{Request, StrBytes};
use markers::participant::{DataBatch, RecordTimestamps};
use markers::wire::{CallError, KafkaConnection};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::time::Instant;
use txn_log::{ProducerEpoch, ProducerId};

/// A client connection to a broker.
pub type Conn = KafkaConnection<TcpStream>;

/// A kafka-protocol string.
pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// A loopback port that was free a moment ago (bound and released: good enough for a test
/// that starts a server on it at once); panics if none can be bound.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Connects to `addr` as client `client_id` (TCP, `TCP_NODELAY`); panics if it cannot.
pub async fn connect(addr: impl ToSocketAddrs, client_id: &str) -> Conn {
    try_connect(addr, client_id).await.expect("connect")
}

/// Connects to `addr` as client `client_id` (TCP, `TCP_NODELAY`), or the connect error.
pub async fn try_connect(addr: impl ToSocketAddrs, client_id: &str) -> std::io::Result<Conn> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(KafkaConnection::new(s, client_id))
}

/// Why a bounded call gave no response.
#[derive(Debug, thiserror::Error)]
pub enum BoundedCallError {
    /// The deadline passed first.
    #[error("timed out")]
    TimedOut,
    /// The call failed (connection lost, codec error, ...).
    #[error(transparent)]
    Failed(#[from] CallError),
}

/// One request/response round trip on `conn` that gives up at `deadline`. After an error the
/// connection's state is unknown (a response may still be on its way): drop it.
pub async fn call_before<S, R>(
    conn: &mut KafkaConnection<S>,
    req: &R,
    version: i16,
    deadline: Instant,
) -> Result<R::Response, BoundedCallError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    R: Request,
{
    match tokio::time::timeout_at(deadline, conn.call(req, version)).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(BoundedCallError::TimedOut),
    }
}

/// A v2 record batch of `values` (offsets from 0, record `i` stamped 1_700_000_000_000 + `i`,
/// no keys); producer `(pid, epoch, base sequence)` (transactional or idempotent) or plain.
pub fn record_batch(
    producer: Option<(i64, i16, i32)>,
    transactional: bool,
    values: &[String],
) -> Bytes {
    let (pid, epoch, base_sequence) = producer.unwrap_or((-1, -1, -1));
    DataBatch {
        producer_id: ProducerId(pid),
        producer_epoch: ProducerEpoch(epoch),
        base_sequence,
        transactional,
        timestamps: RecordTimestamps::Ascending(1_700_000_000_000),
        ..DataBatch::default()
    }
    .encode(values.iter().map(|v| (None, Some(Bytes::from(v.clone())))))
    .expect("encode")
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
