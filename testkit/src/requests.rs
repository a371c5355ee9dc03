//! Transaction requests and response readers: the same requests to the daemon
//! (`coordinator` daemon tests) and to both coordinator modes (`wire_conformance`), and the
//! wait for a transaction to reach a state.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kafka_protocol::messages as km;

use crate::pool::Pool;
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

/// DescribeAcls matching every binding (resource type, pattern type, operation and
/// permission ANY; no name, principal or host filter).
pub fn describe_all_acls_req() -> km::DescribeAclsRequest {
    km::DescribeAclsRequest::default()
        .with_resource_type_filter(1)
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_pattern_type_filter(1)
        .with_operation(1)
        .with_permission_type(1)
}

/// How long [`await_txn_state`] polls.
const TXN_STATE_WAIT: Duration = Duration::from_secs(30);

/// Polls DescribeTransactions(`id`) at `at` (every 50 ms, up to 30 s) until the transaction
/// is in `want` (a state name as Kafka writes it, e.g. `CompleteAbort`): that description.
/// Panics with the last answer if it never is.
pub async fn await_txn_state(
    pool: &mut Pool,
    at: SocketAddr,
    id: &str,
    want: &str,
) -> km::describe_transactions_response::TransactionState {
    let deadline = Instant::now() + TXN_STATE_WAIT;
    let mut last = String::new();
    while Instant::now() < deadline {
        let req = km::DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![km::TransactionalId(s(id))]);
        match pool.call(at, &req, 0).await {
            Ok(r) => match r.transaction_states.into_iter().next() {
                Some(t) if t.error_code == 0 && t.transaction_state.as_str() == want => return t,
                Some(t) => last = format!("error {} state {}", t.error_code, t.transaction_state),
                None => last = "no answer".into(),
            },
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{id} did not reach {want} at {at} within {TXN_STATE_WAIT:?}: {last}");
}
