//! Request handlers for the data path: ApiVersions, Metadata, FindCoordinator, Produce,
//! Fetch, ListOffsets, WriteTxnMarkers and DescribeProducers. Group and transaction APIs are
//! delegated.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    BrokerId, DescribeProducersRequest, DescribeProducersResponse, FetchRequest, FetchResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, ListOffsetsRequest, ListOffsetsResponse,
    MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, RequestKind, ResponseKind,
    TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use markers::apply::ApplyError;
use markers::participant::{Marker, VerificationGuard};
use markers::verify::{Operation, TxnSupport, VerifyTxn};
use txn_log::TopicPartition;

use super::journal::Flush;
use super::partition::PendingSyncs;
use super::server::{Broker, Conn, Req};
use super::{CONSUMER_OFFSETS, NodeAddr};
use coordinator::server::authz::Authz;
use coordinator::server::security_apis;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn code(e: ResponseError) -> i16 {
    e.code()
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// Handles one request of `conn`'s client, after the authorization checks of
/// [`super::security`] (denied parts are answered there and never reach the handlers).
/// `Ok(None)`: no response is owed (acks=0); `Err`: close the connection.
pub(crate) async fn dispatch(
    broker: &Arc<Broker>,
    conn: &Conn,
    req: Req,
) -> anyhow::Result<Option<ResponseKind>> {
    use super::security as sec;
    let v = req.version();
    let authz = |api: &'static str| conn.authz(broker, api);
    let body = match req.body {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(broker.api_versions(0)),
        body @ (RequestKind::SaslHandshake(_) | RequestKind::SaslAuthenticate(_)) => {
            match coordinator::server::sasl_auth::outside_exchange(&body) {
                Some(resp) => resp,
                None => anyhow::bail!("not a SASL request"),
            }
        }
        RequestKind::Metadata(r) => {
            let mut resp = metadata(broker, conn, &r, v);
            let every_topic = match &r.topics {
                None => true,
                Some(list) => v == 0 && list.is_empty(),
            };
            sec::metadata(&authz("Metadata"), every_topic, &mut resp);
            ResponseKind::Metadata(resp)
        }
        RequestKind::FindCoordinator(r) => ResponseKind::FindCoordinator(
            find_coordinator(broker, conn, &authz("FindCoordinator"), &r, v).await,
        ),
        RequestKind::Produce(mut r) => {
            let denied = sec::produce(&authz("Produce"), &mut r);
            let acks = r.acks;
            let resp = if r.topic_data.is_empty() {
                (acks != 0).then(ProduceResponse::default)
            } else {
                produce(broker, r, v).await
            };
            match resp {
                Some(mut resp) => {
                    resp.responses.extend(denied);
                    ResponseKind::Produce(resp)
                }
                None => return Ok(None),
            }
        }
        RequestKind::Fetch(mut r) => {
            let denied = sec::fetch(&authz("Fetch"), &mut r);
            let mut resp = if r.topics.is_empty() && !denied.is_empty() {
                FetchResponse::default()
            } else {
                fetch(broker, &r, v).await
            };
            resp.responses.extend(denied);
            ResponseKind::Fetch(resp)
        }
        RequestKind::ListOffsets(mut r) => {
            let denied = sec::list_offsets(&authz("ListOffsets"), &mut r);
            let mut resp = list_offsets(broker, &r, v).await;
            resp.topics.extend(denied);
            ResponseKind::ListOffsets(resp)
        }
        RequestKind::WriteTxnMarkers(r) => ResponseKind::WriteTxnMarkers(
            match sec::write_txn_markers(&authz("WriteTxnMarkers"), &r) {
                Some(denied) => denied,
                None => write_txn_markers(broker, &r).await,
            },
        ),
        RequestKind::DescribeProducers(mut r) => {
            let denied = sec::describe_producers(&authz("DescribeProducers"), &mut r);
            let mut resp = describe_producers(broker, &r).await;
            resp.topics.extend(denied);
            ResponseKind::DescribeProducers(resp)
        }
        RequestKind::OffsetCommit(mut r) => {
            ResponseKind::OffsetCommit(match sec::offset_commit(&authz("OffsetCommit"), &mut r) {
                Err(denied) => denied,
                Ok(denied) => {
                    let mut resp = super::groups::offset_commit(broker, r, v).await;
                    resp.topics.extend(denied);
                    resp
                }
            })
        }
        RequestKind::OffsetFetch(mut r) => {
            let a = authz("OffsetFetch");
            let every_topic = r.topics.is_none();
            ResponseKind::OffsetFetch(match sec::offset_fetch(&a, &mut r, v) {
                Err(denied) => denied,
                Ok(denied) => {
                    let mut resp = super::groups::offset_fetch(broker, r, v).await;
                    if every_topic {
                        sec::offset_fetch_after(&a, &mut resp);
                    }
                    resp.topics.extend(denied);
                    resp
                }
            })
        }
        RequestKind::TxnOffsetCommit(mut r) => ResponseKind::TxnOffsetCommit(
            match sec::txn_offset_commit(&authz("TxnOffsetCommit"), &mut r) {
                Err(denied) => denied,
                Ok(denied) => {
                    let mut resp = super::groups::txn_offset_commit(broker, r, v).await;
                    resp.topics.extend(denied);
                    resp
                }
            },
        ),
        RequestKind::JoinGroup(r) => {
            if !sec::group_read(&authz("JoinGroup"), r.group_id.0.as_str()) {
                ResponseKind::JoinGroup(
                    kafka_protocol::messages::JoinGroupResponse::default()
                        .with_error_code(code(ResponseError::GroupAuthorizationFailed))
                        .with_generation_id(-1),
                )
            } else {
                ResponseKind::JoinGroup(broker.groups.join(broker, r, v).await)
            }
        }
        RequestKind::SyncGroup(r) => {
            if !sec::group_read(&authz("SyncGroup"), r.group_id.0.as_str()) {
                ResponseKind::SyncGroup(
                    kafka_protocol::messages::SyncGroupResponse::default()
                        .with_error_code(code(ResponseError::GroupAuthorizationFailed)),
                )
            } else {
                ResponseKind::SyncGroup(broker.groups.sync(broker, r, v).await)
            }
        }
        RequestKind::Heartbeat(r) => {
            if !sec::group_read(&authz("Heartbeat"), r.group_id.0.as_str()) {
                ResponseKind::Heartbeat(
                    kafka_protocol::messages::HeartbeatResponse::default()
                        .with_error_code(code(ResponseError::GroupAuthorizationFailed)),
                )
            } else {
                ResponseKind::Heartbeat(broker.groups.heartbeat(broker, r).await)
            }
        }
        RequestKind::LeaveGroup(r) => {
            if !sec::group_read(&authz("LeaveGroup"), r.group_id.0.as_str()) {
                ResponseKind::LeaveGroup(
                    kafka_protocol::messages::LeaveGroupResponse::default()
                        .with_error_code(code(ResponseError::GroupAuthorizationFailed)),
                )
            } else {
                ResponseKind::LeaveGroup(broker.groups.leave(broker, r, v).await)
            }
        }
        RequestKind::CreateAcls(r) => {
            let state = broker.security.state();
            ResponseKind::CreateAcls(
                security_apis::create_acls(
                    &state,
                    &broker.security.metrics,
                    &authz("CreateAcls"),
                    r,
                )
                .await,
            )
        }
        RequestKind::DescribeAcls(r) => ResponseKind::DescribeAcls(security_apis::describe_acls(
            &broker.security.state(),
            &broker.security.metrics,
            &authz("DescribeAcls"),
            &r,
        )),
        RequestKind::DeleteAcls(r) => {
            let state = broker.security.state();
            ResponseKind::DeleteAcls(
                security_apis::delete_acls(
                    &state,
                    &broker.security.metrics,
                    &authz("DeleteAcls"),
                    r,
                )
                .await,
            )
        }
        RequestKind::DescribeUserScramCredentials(r) => {
            ResponseKind::DescribeUserScramCredentials(security_apis::describe_scram(
                &broker.security.state(),
                &broker.security.metrics,
                &authz("DescribeUserScramCredentials"),
                &r,
            ))
        }
        RequestKind::AlterUserScramCredentials(r) => {
            let state = broker.security.state();
            ResponseKind::AlterUserScramCredentials(
                security_apis::alter_scram(
                    &state,
                    &broker.security.metrics,
                    &authz("AlterUserScramCredentials"),
                    r,
                )
                .await,
            )
        }
        other => return coordinator_api(broker, conn, other, v).await.map(Some),
    };
    Ok(Some(body))
}

/// The transaction APIs. Embedded: the daemon's code, checks included
/// ([`super::embedded::dispatch_checked`]). Standalone: the same checks
/// ([`coordinator::server::authz::Authz`]) before a request is forwarded to a daemon, which
/// sees this broker, not the client.
async fn coordinator_api(
    broker: &Arc<Broker>,
    conn: &Conn,
    body: RequestKind,
    v: i16,
) -> anyhow::Result<ResponseKind> {
    use coordinator::server::authz::AddPartitionsAuthz;
    use coordinator::server::protocol as p;
    let authz = |api: &'static str| conn.authz(broker, api);
    if broker.txn.is_embedded() {
        let Some(c) = broker.txn.embedded() else {
            anyhow::bail!("the embedded coordinator is not started");
        };
        return super::embedded::dispatch_checked(c, &authz, body, v).await;
    }
    let body = match body {
        RequestKind::InitProducerId(r) => {
            let req = p::init_producer_id(v, &r);
            if let Err(e) = authz("InitProducerId")
                .init_producer_id(req.transactional_id.as_deref(), req.enable_2pc)
            {
                return Ok(p::init_producer_id_response(
                    v,
                    coordinator::InitProducerIdResponse::error(e),
                ));
            }
            RequestKind::InitProducerId(r)
        }
        RequestKind::AddPartitionsToTxn(r) => {
            match authz("AddPartitionsToTxn").add_partitions(p::add_partitions(v, &r)) {
                AddPartitionsAuthz::Allowed(_) => RequestKind::AddPartitionsToTxn(r),
                AddPartitionsAuthz::Denied(resp) => {
                    return Ok(p::add_partitions_response(v, &resp));
                }
                AddPartitionsAuthz::Partial {
                    forward,
                    forwarded_at,
                    answered,
                } => {
                    // The allowed transactions (v4+, brokers) go to the daemon, in order.
                    let from_daemon = if forward.transactions.is_empty() {
                        None
                    } else {
                        let mut only = r.clone();
                        only.transactions = r
                            .transactions
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| forwarded_at.contains(i))
                            .map(|(_, t)| t.clone())
                            .collect();
                        let ResponseKind::AddPartitionsToTxn(resp) =
                            super::txn::dispatch(broker, RequestKind::AddPartitionsToTxn(only), v)
                                .await?
                        else {
                            anyhow::bail!("unexpected answer to AddPartitionsToTxn");
                        };
                        Some(resp)
                    };
                    let here = p::add_partitions_response(
                        v,
                        &coordinator::AddPartitionsToTxnResponse {
                            error: coordinator::ErrorCode::NONE,
                            results: answered.iter().map(|(_, t)| t.clone()).collect(),
                        },
                    );
                    let ResponseKind::AddPartitionsToTxn(mut here) = here else {
                        anyhow::bail!("unexpected AddPartitionsToTxn conversion");
                    };
                    if let Some(from) = from_daemon {
                        let mut slots: Vec<(usize, _)> = answered
                            .iter()
                            .map(|(i, _)| *i)
                            .zip(std::mem::take(&mut here.results_by_transaction))
                            .chain(
                                forwarded_at
                                    .iter()
                                    .copied()
                                    .zip(from.results_by_transaction),
                            )
                            .collect();
                        slots.sort_by_key(|(i, _)| *i);
                        here.results_by_transaction = slots.into_iter().map(|(_, t)| t).collect();
                        here.error_code = from.error_code;
                    }
                    return Ok(ResponseKind::AddPartitionsToTxn(here));
                }
            }
        }
        RequestKind::AddOffsetsToTxn(r) => {
            let req = p::add_offsets(v, &r);
            if let Err(e) =
                authz("AddOffsetsToTxn").add_offsets(&req.transactional_id, &req.group_id)
            {
                return Ok(p::add_offsets_response(e));
            }
            RequestKind::AddOffsetsToTxn(r)
        }
        RequestKind::EndTxn(r) => {
            let req = p::end_txn(v, &r);
            if let Err(e) = authz("EndTxn").end_txn(&req.transactional_id) {
                return Ok(p::end_txn_response(
                    v,
                    coordinator::EndTxnResponse::error(e),
                ));
            }
            RequestKind::EndTxn(r)
        }
        RequestKind::DescribeTransactions(mut r) => {
            let a = authz("DescribeTransactions");
            let ids: Vec<String> = r
                .transactional_ids
                .iter()
                .map(|t| t.0.to_string())
                .collect();
            let allowed = a.describable(&ids);
            r.transactional_ids = r
                .transactional_ids
                .into_iter()
                .zip(&allowed)
                .filter(|(_, ok)| **ok)
                .map(|(t, _)| t)
                .collect();
            let mut resp = if r.transactional_ids.is_empty() {
                kafka_protocol::messages::DescribeTransactionsResponse::default()
            } else {
                match super::txn::dispatch(broker, RequestKind::DescribeTransactions(r), v).await? {
                    ResponseKind::DescribeTransactions(resp) => resp,
                    _ => anyhow::bail!("unexpected answer to DescribeTransactions"),
                }
            };
            if a.enabled() {
                use security::acl::{AclOperation, ResourceType};
                for st in &mut resp.transaction_states {
                    st.topics.retain(|t| {
                        a.allowed(
                            AclOperation::Describe,
                            ResourceType::Topic,
                            t.topic.0.as_str(),
                        )
                    });
                }
            }
            for (id, ok) in ids.iter().zip(&allowed) {
                if !ok {
                    resp.transaction_states.push(
                        kafka_protocol::messages::describe_transactions_response::TransactionState::default()
                            .with_transactional_id(kafka_protocol::messages::TransactionalId(str_bytes(id)))
                            .with_error_code(code(ResponseError::TransactionalIdAuthorizationFailed))
                            .with_producer_id(kafka_protocol::messages::ProducerId(-1))
                            .with_producer_epoch(-1),
                    );
                }
            }
            return Ok(ResponseKind::DescribeTransactions(resp));
        }
        other => other,
    };
    super::txn::dispatch(broker, body, v).await
}

// ===== Metadata =====

fn metadata(broker: &Broker, conn: &Conn, r: &MetadataRequest, v: i16) -> MetadataResponse {
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    // This node at the address of the listener the client came through (as Kafka answers with
    // the same listener name); the other nodes at their `--cluster` addresses.
    let mut nodes: Vec<(i32, NodeAddr)> = broker
        .cluster
        .nodes()
        .iter()
        .map(|(&id, a)| {
            if id == broker.config.node_id {
                (id, conn.advertised.clone())
            } else {
                (id, a.clone())
            }
        })
        .collect();
    // Standalone mode: the live daemons are listed too, so clients (librdkafka) that only
    // connect to coordinators they know from Metadata can reach them. They lead no partition.
    for (id, addr) in broker.txn.daemon_nodes() {
        if !nodes.iter().any(|(n, _)| *n == id) {
            nodes.push((id, addr));
        }
    }
    let brokers = nodes
        .into_iter()
        .map(|(id, a)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(id))
                .with_host(str_bytes(&a.host))
                .with_port(i32::from(a.port))
        })
        .collect();
    let names: Vec<String> = match &r.topics {
        Some(list) if !(v == 0 && list.is_empty()) => list
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .collect(),
        // null (or an empty v0 list): every topic; internal topics are left out
        _ => broker
            .topics
            .keys()
            .filter(|t| !t.starts_with("__"))
            .cloned()
            .collect(),
    };
    let topics = names
        .into_iter()
        .map(|name| {
            let mut t =
                MetadataResponseTopic::default().with_name(Some(TopicName(str_bytes(&name))));
            if v >= 1 {
                t.is_internal = name.starts_with("__");
            }
            match broker.topics.get(&name) {
                None => t.with_error_code(code(ResponseError::UnknownTopicOrPartition)),
                Some(&n) => t.with_partitions(
                    (0..n)
                        .map(|p| {
                            let leader = BrokerId(broker.cluster.leader(&name, p));
                            let mut part = MetadataResponsePartition::default()
                                .with_partition_index(p)
                                .with_leader_id(leader)
                                .with_replica_nodes(vec![leader])
                                .with_isr_nodes(vec![leader]);
                            if v >= 7 {
                                part.leader_epoch = 0;
                            }
                            part
                        })
                        .collect(),
                ),
            }
        })
        .collect();
    let mut resp = MetadataResponse::default()
        .with_brokers(brokers)
        .with_topics(topics);
    if v >= 1 {
        resp.controller_id = BrokerId(broker.cluster.controller());
    }
    if v >= 2 {
        resp.cluster_id = Some(str_bytes("refbroker"));
    }
    resp
}

// ===== FindCoordinator =====

/// The node coordinating `key` of `key_type` (0 group, 1 transaction); this node at the
/// address of the client's listener.
fn coordinator_for(
    broker: &Broker,
    conn: &Conn,
    key_type: i8,
    key: &str,
) -> Result<(i32, String, u16), i16> {
    let node = match key_type {
        0 => broker.cluster.leader(
            CONSUMER_OFFSETS,
            super::groups::offsets_partition_for(broker, key),
        ),
        1 => broker
            .txn
            .coordinator_node(broker, key)
            .ok_or(code(ResponseError::CoordinatorNotAvailable))?,
        _ => return Err(code(ResponseError::InvalidRequest)),
    };
    if node == broker.config.node_id {
        return Ok((node, conn.advertised.host.clone(), conn.advertised.port));
    }
    let addr = broker
        .cluster
        .addr(node)
        .ok_or(code(ResponseError::CoordinatorNotAvailable))?;
    Ok((node, addr.host.clone(), addr.port))
}

/// FindCoordinator: each key checked first ([`Authz::find_coordinator_key`], the daemon's
/// check: DESCRIBE on the TransactionalId or the Group); a denied key is answered with its
/// error and is neither looked up nor relayed.
async fn find_coordinator(
    broker: &Broker,
    conn: &Conn,
    a: &Authz<'_>,
    r: &FindCoordinatorRequest,
    v: i16,
) -> FindCoordinatorResponse {
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    let denied = |key: &str| a.find_coordinator_key(r.key_type, key).map(|e| e.0);
    if v < 4 {
        if let Some(e) = denied(r.key.as_str()) {
            return FindCoordinatorResponse::default()
                .with_error_code(e)
                .with_node_id(BrokerId(-1))
                .with_port(-1);
        }
    } else {
        let refused: Vec<(StrBytes, i16)> = r
            .coordinator_keys
            .iter()
            .filter_map(|k| denied(k.as_str()).map(|e| (k.clone(), e)))
            .collect();
        if !refused.is_empty() {
            let mut allowed = r.clone();
            allowed
                .coordinator_keys
                .retain(|k| !refused.iter().any(|(d, _)| d == k));
            let mut resp = if allowed.coordinator_keys.is_empty() {
                FindCoordinatorResponse::default()
            } else {
                Box::pin(find_coordinator_allowed(broker, conn, &allowed, v)).await
            };
            resp.coordinators.extend(refused.into_iter().map(|(k, e)| {
                Coordinator::default()
                    .with_key(k)
                    .with_error_code(e)
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
            }));
            return resp;
        }
    }
    find_coordinator_allowed(broker, conn, r, v).await
}

async fn find_coordinator_allowed(
    broker: &Broker,
    conn: &Conn,
    r: &FindCoordinatorRequest,
    v: i16,
) -> FindCoordinatorResponse {
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    // Standalone mode: the daemons know who coordinates an id; ask one.
    if r.key_type == 1 && !broker.txn.is_embedded() {
        match broker.txn.find_coordinator(r, v).await {
            Ok(resp) => return resp,
            Err(e) => {
                tracing::warn!(error = %e, "FindCoordinator(TRANSACTION) not answered by a daemon");
                let unavailable = code(ResponseError::CoordinatorNotAvailable);
                return if v >= 4 {
                    FindCoordinatorResponse::default().with_coordinators(
                        r.coordinator_keys
                            .iter()
                            .map(|k| {
                                Coordinator::default()
                                    .with_key(k.clone())
                                    .with_error_code(unavailable)
                                    .with_node_id(BrokerId(-1))
                                    .with_port(-1)
                            })
                            .collect(),
                    )
                } else {
                    FindCoordinatorResponse::default()
                        .with_error_code(unavailable)
                        .with_node_id(BrokerId(-1))
                        .with_port(-1)
                };
            }
        }
    }
    if v >= 4 {
        let coordinators = r
            .coordinator_keys
            .iter()
            .map(|k| {
                let c = Coordinator::default().with_key(k.clone());
                match coordinator_for(broker, conn, r.key_type, k) {
                    Ok((id, host, port)) => c
                        .with_node_id(BrokerId(id))
                        .with_host(str_bytes(&host))
                        .with_port(i32::from(port)),
                    Err(e) => c
                        .with_error_code(e)
                        .with_node_id(BrokerId(-1))
                        .with_port(-1),
                }
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    match coordinator_for(broker, conn, r.key_type, &r.key) {
        Ok((id, host, port)) => FindCoordinatorResponse::default()
            .with_node_id(BrokerId(id))
            .with_host(str_bytes(&host))
            .with_port(i32::from(port)),
        Err(e) => FindCoordinatorResponse::default()
            .with_error_code(e)
            .with_node_id(BrokerId(-1))
            .with_port(-1),
    }
}

// ===== Produce =====

async fn produce(broker: &Arc<Broker>, r: ProduceRequest, v: i16) -> Option<ProduceResponse> {
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    let acks = r.acks;
    // KIP-890: first transactional appends wait for the coordinator's yes (part 1), or for
    // the coordinator to add the partition (part 2, Produce v12+).
    let mut verified = if (-1..=1).contains(&acks) {
        verify_first_appends(broker, &r, TxnSupport::from_produce_version(v)).await
    } else {
        HashMap::new()
    };
    let mut responses = Vec::with_capacity(r.topic_data.len());
    let mut appended = false;
    // Written, not yet durable: synced together after the loop (group commit).
    let mut pending = PendingSyncs::default();
    for t in r.topic_data {
        let name = t.name.0.to_string();
        let mut parts = Vec::with_capacity(t.partition_data.len());
        for p in t.partition_data {
            let mut resp = PartitionProduceResponse::default()
                .with_index(p.index)
                .with_base_offset(-1);
            let result = if !(-1..=1).contains(&acks) {
                Err(ResponseError::InvalidRequiredAcks)
            } else if name.starts_with("__") {
                Err(ResponseError::InvalidTopicException)
            } else if let Some(Err(e)) = verified.get(&(name.clone(), p.index)) {
                Err(*e)
            } else if let Some(part_lock) = broker.partition(&name, p.index) {
                let guard = verified
                    .remove(&(name.clone(), p.index))
                    .and_then(Result::ok)
                    .flatten();
                let records = p.records.unwrap_or_default();
                let mut part = part_lock.lock().await;
                let res = part.append_produce(&records, guard);
                if v >= 5 {
                    resp.log_start_offset = part.log_start_offset();
                }
                drop(part);
                res.map(|(base, end)| {
                    pending.add((name.clone(), p.index), part_lock, end);
                    base
                })
            } else if broker.exists(&name, p.index) {
                Err(ResponseError::NotLeaderOrFollower)
            } else {
                Err(ResponseError::UnknownTopicOrPartition)
            };
            match result {
                Ok(base) => {
                    appended = true;
                    resp.base_offset = base;
                }
                Err(e) => resp.error_code = code(e),
            }
            parts.push(resp);
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(TopicName(str_bytes(&name)))
                .with_partition_responses(parts),
        );
    }
    if broker.flush == Flush::None {
        // Written is durable; the high watermark already covers it.
        if appended {
            broker.appended.notify_waiters();
        }
    } else if acks == -1 {
        // acks=all: answered once its data is on disk (one fdatasync of the journal, shared
        // with concurrent requests); a failed sync fails the request's partitions.
        let failed = pending.wait().await;
        for t in &mut responses {
            for p in &mut t.partition_responses {
                if failed
                    .iter()
                    .any(|(n, i)| n.as_str() == t.name.0.as_str() && *i == p.index)
                {
                    p.error_code = code(ResponseError::KafkaStorageError);
                    p.base_offset = -1;
                }
            }
        }
        if appended {
            broker.appended.notify_waiters();
        }
    } else if appended {
        // acks 0/1: answered now; the high watermark follows the group commit.
        let broker = Arc::clone(broker);
        tokio::spawn(async move {
            pending.wait().await;
            broker.appended.notify_waiters();
        });
    }
    (acks != 0).then(|| ProduceResponse::default().with_responses(responses))
}

/// Per partition of a Produce: the verification guard to append with (`None` for an add made
/// with verification off), or the error to answer.
type Verified = HashMap<(String, i32), Result<Option<VerificationGuard>, ResponseError>>;

/// How long a TV2 add answered CONCURRENT_TRANSACTIONS is retried by the broker before the
/// client gets the error, and the pause between tries (Kafka's
/// `add.partitions.to.txn.retry.backoff.max.ms` 100 and `add.partitions.to.txn.retry.backoff.ms`
/// 20): the producer's previous transaction is usually completing and done within it.
pub(crate) const ADD_RETRY_FOR: Duration = Duration::from_millis(100);
pub(crate) const ADD_RETRY_BACKOFF: Duration = Duration::from_millis(20);

/// KIP-890: [`verify_first_appends_once`], and for an add (Produce v12+) that met a
/// completing transaction (CONCURRENT_TRANSACTIONS), again after a pause while
/// [`ADD_RETRY_FOR`] lasts, as Kafka's `ReplicaManager` does for `addPartition`.
async fn verify_first_appends(
    broker: &Broker,
    r: &ProduceRequest,
    support: TxnSupport,
) -> Verified {
    let start = tokio::time::Instant::now();
    loop {
        let out = verify_first_appends_once(broker, r, support).await;
        let concurrent = out.values().any(|v| {
            matches!(v, Err(e) if e.code() == markers::verify::codes::CONCURRENT_TRANSACTIONS.0)
        });
        if support != TxnSupport::AddPartition
            || !concurrent
            || start.elapsed() + ADD_RETRY_BACKOFF > ADD_RETRY_FOR
        {
            return out;
        }
        tokio::time::sleep(ADD_RETRY_BACKOFF).await;
    }
}

/// KIP-890 part 1 (`transaction.partition.verification.enable`): for every partition whose
/// batch would open its producer's transaction here, a verification guard from the
/// participant ([`super::partition::Partition::start_verification`], under the partition
/// lock), then one question to the coordinator for all of them
/// ([`markers::verify::Verifier`]: merged with concurrent requests for the same coordinator),
/// without holding any lock. A refused partition gets the code Kafka's broker answers
/// ([`markers::verify::Verdict::client_code`] for the request's version: INVALID_TXN_STATE
/// when it is not in the transaction, NOT_ENOUGH_REPLICAS while the coordinator cannot
/// answer, ...). Partitions needing no verification are not in the map. Part 2 (`support`
/// is [`TxnSupport::AddPartition`], Produce v12+): the question is an add, asked also with
/// verification off.
async fn verify_first_appends_once(
    broker: &Broker,
    r: &ProduceRequest,
    support: TxnSupport,
) -> Verified {
    let mut out = Verified::new();
    let add = support.operation() == Operation::Add;
    if !broker.verifier.config().enable && !add {
        return out;
    }
    let now = now_ms();
    let mut wanted = Vec::new();
    for t in &r.topic_data {
        let name = t.name.0.to_string();
        if name.starts_with("__") {
            continue;
        }
        for p in &t.partition_data {
            let (Some(part), Some(records)) = (broker.partition(&name, p.index), &p.records) else {
                continue;
            };
            let started = part.lock().await.start_verification(records, now, add);
            match started {
                Ok(None) => {}
                Ok(Some((pid, epoch, guard))) => {
                    wanted.push((
                        TopicPartition::new(name.clone(), p.index),
                        pid,
                        epoch,
                        guard,
                    ));
                }
                Err(e) => {
                    out.insert((name.clone(), p.index), Err(e));
                }
            }
        }
    }
    let Some(&(_, pid, epoch, _)) = wanted.first() else {
        return out;
    };
    let transactional_id = r
        .transactional_id
        .as_ref()
        .map(|t| t.0.to_string())
        .filter(|t| !t.is_empty());
    let refuse_all = |out: &mut Verified, e: ResponseError| {
        for (tp, ..) in &wanted {
            out.insert((tp.topic.clone(), tp.partition), Err(e));
        }
    };
    let Some(transactional_id) = transactional_id else {
        // Transactional batches without a transactional id: nothing to ask about.
        refuse_all(&mut out, ResponseError::InvalidTxnState);
        return out;
    };
    if wanted.iter().any(|w| (w.1, w.2) != (pid, epoch)) {
        // Kafka: "Transactional records contained more than one producer ID".
        refuse_all(&mut out, ResponseError::InvalidProducerIdMapping);
        return out;
    }
    let answers = broker
        .verifier
        .verify(VerifyTxn {
            transactional_id,
            producer_id: pid,
            producer_epoch: epoch,
            partitions: wanted.iter().map(|w| w.0.clone()).collect(),
            operation: support.operation(),
        })
        .await;
    for ((tp, verdict), (.., guard)) in answers.into_iter().zip(wanted) {
        let result = if verdict.allows_append() {
            Ok(guard)
        } else {
            tracing::info!(
                topic = %tp.topic, partition = tp.partition, producer_id = pid.0,
                epoch = epoch.0, ?verdict, ?support, "produce refused by transaction verification"
            );
            let code = verdict.client_code(support).0;
            Err(ResponseError::try_from_code(code).unwrap_or(ResponseError::Unknown(code)))
        };
        out.insert((tp.topic, tp.partition), result);
    }
    out
}

// ===== Fetch =====

async fn fetch(broker: &Arc<Broker>, r: &FetchRequest, v: i16) -> FetchResponse {
    let cap = broker.config.setting_i64("fetch.max.wait.ms", 1000);
    let wait_ms = i64::from(r.max_wait_ms.max(0)).min(cap);
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
    // bounded: each pass either returns or waits for an append / the deadline
    loop {
        let notified = broker.appended.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (resp, bytes) = fetch_once(broker, r, v).await;
        let min_bytes = usize::try_from(r.min_bytes.max(1)).unwrap_or(1);
        if bytes >= min_bytes || tokio::time::Instant::now() >= deadline {
            return resp;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return fetch_once(broker, r, v).await.0;
        }
    }
}

async fn fetch_once(broker: &Broker, r: &FetchRequest, v: i16) -> (FetchResponse, usize) {
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchableTopicResponse, PartitionData,
    };
    let read_committed = r.isolation_level == 1;
    let mut budget = usize::try_from(r.max_bytes.max(1)).unwrap_or(usize::MAX);
    let mut total = 0usize;
    let mut responses = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let name = t.topic.0.to_string();
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let mut data = PartitionData::default()
                .with_partition_index(p.partition)
                .with_high_watermark(-1)
                .with_aborted_transactions(None)
                .with_records(None);
            let Some(part) = broker.partition(&name, p.partition) else {
                data.error_code = code(if broker.exists(&name, p.partition) {
                    ResponseError::NotLeaderOrFollower
                } else {
                    ResponseError::UnknownTopicOrPartition
                });
                parts.push(data);
                continue;
            };
            let part = part.lock().await;
            data.high_watermark = part.high_watermark();
            data.last_stable_offset = part.last_stable_offset();
            if v >= 5 {
                data.log_start_offset = part.log_start_offset();
            }
            if p.fetch_offset < part.log_start_offset() || p.fetch_offset > part.high_watermark() {
                data.error_code = code(ResponseError::OffsetOutOfRange);
                parts.push(data);
                continue;
            }
            let max = usize::try_from(p.partition_max_bytes.max(1))
                .unwrap_or(usize::MAX)
                .min(budget.max(1));
            let read = if budget == 0 {
                None
            } else {
                Some(part.read(p.fetch_offset, read_committed, max))
            };
            if let Some(read) = read {
                budget = budget.saturating_sub(read.records.len());
                total += read.records.len();
                data.aborted_transactions = read.aborted.map(|list| {
                    list.into_iter()
                        .map(|(pid, first)| {
                            AbortedTransaction::default()
                                .with_producer_id(kafka_protocol::messages::ProducerId(pid))
                                .with_first_offset(first)
                        })
                        .collect()
                });
                data.records = Some(read.records);
            } else {
                data.records = Some(bytes::Bytes::new());
            }
            parts.push(data);
        }
        responses.push(
            FetchableTopicResponse::default()
                .with_topic(TopicName(str_bytes(&name)))
                .with_partitions(parts),
        );
    }
    (FetchResponse::default().with_responses(responses), total)
}

// ===== ListOffsets =====

async fn list_offsets(broker: &Broker, r: &ListOffsetsRequest, v: i16) -> ListOffsetsResponse {
    use kafka_protocol::messages::list_offsets_response::{
        ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
    };
    let read_committed = r.isolation_level == 1;
    let topics = r
        .topics
        .iter()
        .map(|t| {
            let name = t.name.0.to_string();
            let partitions = t.partitions.iter().map(|p| {
                let mut out = ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_timestamp(-1)
                    .with_offset(-1);
                if v >= 4 {
                    out.leader_epoch = 0;
                }
                (name.clone(), p.timestamp, out)
            });
            (name.clone(), partitions.collect::<Vec<_>>())
        })
        .collect::<Vec<_>>();
    let mut out_topics = Vec::with_capacity(topics.len());
    for (name, parts) in topics {
        let mut out_parts = Vec::with_capacity(parts.len());
        for (topic, ts, mut out) in parts {
            match broker.partition(&topic, out.partition_index) {
                None => {
                    out.error_code = code(if broker.exists(&topic, out.partition_index) {
                        ResponseError::NotLeaderOrFollower
                    } else {
                        ResponseError::UnknownTopicOrPartition
                    });
                }
                Some(part) => {
                    let part = part.lock().await;
                    let latest = if read_committed {
                        part.last_stable_offset()
                    } else {
                        part.high_watermark()
                    };
                    match ts {
                        -1 => out.offset = latest,
                        -2 => out.offset = part.log_start_offset(),
                        ts if ts >= 0 => {
                            if let Some((o, t)) = part.offset_for_timestamp(ts)
                                && o < latest
                            {
                                out.offset = o;
                                out.timestamp = t;
                            }
                        }
                        _ => out.error_code = code(ResponseError::UnsupportedVersion),
                    }
                }
            }
            out_parts.push(out);
        }
        out_topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(TopicName(str_bytes(&name)))
                .with_partitions(out_parts),
        );
    }
    ListOffsetsResponse::default().with_topics(out_topics)
}

// ===== WriteTxnMarkers =====

/// Answers a WriteTxnMarkers request: the library's conversion ([`markers::apply`]) around
/// [`apply_markers`]. Each marker's transaction version is the request's `TransactionVersion`
/// (v2, KIP-1228; 0, TV0's rule, when the request came as v1).
pub(crate) async fn write_txn_markers(
    broker: &Broker,
    r: &WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let results = apply_markers(broker, markers::apply::markers_of(r, &[])).await;
    markers::apply::response_of(r, &results)
}

/// Applies transaction markers to the partitions this node leads (the participant side of
/// KIP-98): one control batch per partition, appended; then one group commit of the journal
/// makes them all durable before answering. The embedded coordinator's
/// in-process delivery ([`markers::apply::MarkerApplier`]) and the wire handler both land here.
pub(crate) async fn apply_markers(
    broker: &Broker,
    entries: Vec<(TopicPartition, Marker)>,
) -> Vec<Result<(), ApplyError>> {
    let mut results = Vec::with_capacity(entries.len());
    let mut appended = false;
    // Markers are written first, then made durable together.
    let mut pending = PendingSyncs::default();
    for (tp, m) in &entries {
        let (name, p) = (tp.topic.clone(), tp.partition);
        let result = match broker.partition(&name, p) {
            Some(part_lock) => {
                let mut part = part_lock.lock().await;
                let written = part.write_marker(
                    m.producer_id,
                    m.producer_epoch,
                    m.coordinator_epoch,
                    m.result,
                    u8::try_from(m.txn_version.0).unwrap_or(0),
                    now_ms(),
                );
                if written.is_ok() {
                    // A cached verification may describe the transaction this marker ends.
                    broker.verifier.marker_written(m.producer_id);
                }
                match written {
                    Ok(end) if part.is_offsets() => {
                        // The offset store shows the outcome already: durable before anyone
                        // else may look.
                        appended = true;
                        part.make_durable_locked(end)
                            .await
                            .map_err(|e| ApplyError::Storage(e.to_string()))
                    }
                    Ok(end) => {
                        appended = true;
                        pending.add((name, p), part_lock, end);
                        Ok(())
                    }
                    Err(e) => Err(ApplyError::Code(code(e).into())),
                }
            }
            None if broker.exists(&name, p) => Err(ApplyError::NotLeader),
            None => Err(ApplyError::UnknownPartition),
        };
        results.push(result);
    }
    let failed = pending.wait().await;
    for ((tp, _), r) in entries.iter().zip(results.iter_mut()) {
        if failed
            .iter()
            .any(|(n, i)| n.as_str() == tp.topic.as_str() && *i == tp.partition)
        {
            *r = Err(ApplyError::Storage("group commit failed".into()));
        }
    }
    if appended {
        broker.appended.notify_waiters();
    }
    results
}

// ===== DescribeProducers =====

/// DescribeProducers (KIP-664, what `kafka-transactions.sh describe-producers`, `find-hanging`
/// and `abort --start-offset` ask the partition leader): the participant's producer state of
/// each partition this node leads ([`markers::participant::PartitionState::active_producers`]).
/// A partition that does not exist gets UNKNOWN_TOPIC_OR_PARTITION, one led by another node
/// NOT_LEADER_OR_FOLLOWER, as Kafka's `ReplicaManager.activeProducerState` answers (with one
/// replica per partition there is no follower to ask).
pub(crate) async fn describe_producers(
    broker: &Broker,
    r: &DescribeProducersRequest,
) -> DescribeProducersResponse {
    use kafka_protocol::messages::describe_producers_response::{
        PartitionResponse, ProducerState, TopicResponse,
    };
    let mut topics = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let name = t.name.0.to_string();
        let mut partitions = Vec::with_capacity(t.partition_indexes.len());
        for &p in &t.partition_indexes {
            let mut out = PartitionResponse::default().with_partition_index(p);
            match broker.partition(&name, p) {
                Some(part) => {
                    let rows = part.lock().await.active_producers();
                    out.active_producers = rows
                        .into_iter()
                        .map(|a| {
                            ProducerState::default()
                                .with_producer_id(kafka_protocol::messages::ProducerId(
                                    a.producer_id.0,
                                ))
                                .with_producer_epoch(i32::from(a.producer_epoch.0))
                                .with_last_sequence(a.last_sequence)
                                .with_last_timestamp(a.last_timestamp_ms)
                                .with_coordinator_epoch(a.coordinator_epoch.0)
                                .with_current_txn_start_offset(a.current_txn_start_offset)
                        })
                        .collect();
                }
                None if broker.exists(&name, p) => {
                    out.error_code = code(ResponseError::NotLeaderOrFollower);
                }
                None => out.error_code = code(ResponseError::UnknownTopicOrPartition),
            }
            partitions.push(out);
        }
        topics.push(
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions),
        );
    }
    DescribeProducersResponse::default().with_topics(topics)
}
