//! Transaction requests and response readers: the same requests to the daemon
//! (`coordinator` daemon tests) and to both coordinator modes (`wire_conformance`).

use kafka_protocol::messages as km;

use crate::wire::sb as s;

/// InitProducerId for `id` (or an idempotent producer) with `timeout_ms`.
pub fn init_req(id: Option<&str>, timeout_ms: i32) -> km::InitProducerIdRequest {
    km::InitProducerIdRequest::default()
        .with_transactional_id(id.map(|i| km::TransactionalId(s(i))))
        .with_transaction_timeout_ms(timeout_ms)
}

/// AddPartitionsToTxn v0-3 of `parts` (topic, partition) to `id`'s transaction.
pub fn add_req_v3(
    id: &str,
    pid: i64,
    epoch: i16,
    parts: &[(&str, i32)],
) -> km::AddPartitionsToTxnRequest {
    let mut topics: Vec<km::add_partitions_to_txn_request::AddPartitionsToTxnTopic> = Vec::new();
    for (t, p) in parts {
        match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
            Some(x) => x.partitions.push(*p),
            None => topics.push(
                km::add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(km::TopicName(s(t)))
                    .with_partitions(vec![*p]),
            ),
        }
    }
    km::AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(km::TransactionalId(s(id)))
        .with_v3_and_below_producer_id(km::ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(topics)
}

/// Partition errors of a v0-3 AddPartitionsToTxn response, as (topic, partition, code).
pub fn add_errors(r: &km::AddPartitionsToTxnResponse) -> Vec<(String, i32, i16)> {
    let mut v: Vec<_> = r
        .results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| {
            t.results_by_partition.iter().map(move |p| {
                (
                    t.name.0.to_string(),
                    p.partition_index,
                    p.partition_error_code,
                )
            })
        })
        .collect();
    v.sort();
    v
}

/// EndTxn of `id`'s transaction: commit or abort.
pub fn end_req(id: &str, pid: i64, epoch: i16, commit: bool) -> km::EndTxnRequest {
    km::EndTxnRequest::default()
        .with_transactional_id(km::TransactionalId(s(id)))
        .with_producer_id(km::ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit)
}
