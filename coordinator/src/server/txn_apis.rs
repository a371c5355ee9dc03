//! The transaction APIs (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
//! DescribeTransactions, ListTransactions) as a server answers them: Kafka's authorization
//! checks first ([`super::authz`]; a denied request never reaches the coordinator), then the
//! [`Coordinator`] through the [`protocol`](super::protocol) conversions. The daemon and a
//! broker embedding the coordinator (the test suite's reference broker) both answer with
//! [`handle`].

use kafka_protocol::messages::{RequestKind, ResponseKind};

use super::authz::Authz;
use super::protocol as p;
use crate::ErrorCode;
use crate::shell::{Coordinator, Metrics};

/// Answers one transaction-API request of a client whose checks `authz` makes (one
/// [`Authz`] per API name); the outcome is counted in the coordinator's request metrics.
/// `Err(body)`: `body` is not a transaction API.
pub async fn handle<'a>(
    c: &Coordinator,
    authz: &(dyn Fn(&'static str) -> Authz<'a> + Sync),
    version: i16,
    body: RequestKind,
) -> Result<ResponseKind, RequestKind> {
    let m = c.metrics();
    Ok(match body {
        RequestKind::InitProducerId(r) => {
            let req = p::init_producer_id(version, &r);
            if let Err(e) = authz("InitProducerId")
                .init_producer_id(req.transactional_id.as_deref(), req.enable_2pc)
            {
                m.record("InitProducerId", e);
                return Ok(p::init_producer_id_response(
                    version,
                    crate::InitProducerIdResponse::error(e),
                ));
            }
            p::init_producer_id_response(version, c.init_producer_id(req).await)
        }
        RequestKind::AddPartitionsToTxn(r) => {
            use super::authz::AddPartitionsAuthz;
            let resp = match authz("AddPartitionsToTxn")
                .add_partitions(p::add_partitions(version, &r))
            {
                AddPartitionsAuthz::Allowed(req) => c.add_partitions_to_txn(req).await,
                AddPartitionsAuthz::Denied(resp) => {
                    record_add_partitions(m, &resp);
                    resp
                }
                AddPartitionsAuthz::Partial {
                    forward,
                    forwarded_at,
                    answered,
                } => {
                    let answered_here = crate::AddPartitionsToTxnResponse {
                        error: ErrorCode::NONE,
                        results: answered.iter().map(|(_, r)| r.clone()).collect(),
                    };
                    record_add_partitions(m, &answered_here);
                    let from_coordinator = if forward.transactions.is_empty() {
                        crate::AddPartitionsToTxnResponse {
                            error: ErrorCode::NONE,
                            results: Vec::new(),
                        }
                    } else {
                        c.add_partitions_to_txn(forward).await
                    };
                    super::authz::merge_add_partitions(from_coordinator, &forwarded_at, answered)
                }
            };
            p::add_partitions_response(version, &resp)
        }
        RequestKind::AddOffsetsToTxn(r) => {
            let req = p::add_offsets(version, &r);
            if let Err(e) =
                authz("AddOffsetsToTxn").add_offsets(&req.transactional_id, &req.group_id)
            {
                m.record("AddOffsetsToTxn", e);
                return Ok(p::add_offsets_response(e));
            }
            p::add_offsets_response(c.add_offsets_to_txn(req).await)
        }
        RequestKind::EndTxn(r) => {
            let req = p::end_txn(version, &r);
            if let Err(e) = authz("EndTxn").end_txn(&req.transactional_id) {
                m.record("EndTxn", e);
                return Ok(p::end_txn_response(
                    version,
                    crate::EndTxnResponse::error(e),
                ));
            }
            p::end_txn_response(version, c.end_txn(req).await)
        }
        RequestKind::DescribeTransactions(r) => {
            let a = authz("DescribeTransactions");
            let mut req = p::describe(&r);
            let ids = req.transactional_ids.clone();
            let allowed = a.describable(&ids);
            if allowed.iter().any(|ok| !ok) {
                m.record(
                    "DescribeTransactions",
                    ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                );
            }
            req.transactional_ids = ids
                .iter()
                .zip(&allowed)
                .filter(|(_, ok)| **ok)
                .map(|(id, _)| id.clone())
                .collect();
            let described = if req.transactional_ids.is_empty() {
                Vec::new()
            } else {
                c.describe_transactions(req).await
            };
            p::describe_response(&a.describe_answer(&ids, &allowed, described))
        }
        RequestKind::ListTransactions(r) => match p::list(version, &r) {
            Ok(req) => p::list_response(
                &authz("ListTransactions").list_answer(c.list_transactions(req).await),
            ),
            Err(error) => {
                m.record("ListTransactions", error);
                p::list_response(&crate::ListTransactionsResponse {
                    error,
                    unknown_state_filters: Vec::new(),
                    transactions: Vec::new(),
                })
            }
        },
        other => return Err(other),
    })
}

/// Counts the partition errors of AddPartitionsToTxn answered without the coordinator.
fn record_add_partitions(m: &Metrics, resp: &crate::AddPartitionsToTxnResponse) {
    if !resp.error.is_none() {
        m.record("AddPartitionsToTxn", resp.error);
    }
    for r in &resp.results {
        for (_, e) in &r.partitions {
            m.record("AddPartitionsToTxn", *e);
        }
    }
}
