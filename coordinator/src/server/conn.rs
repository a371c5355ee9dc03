//! One task per client connection: bounded frames, guarded decode, one request at a time
//! (Kafka answers a connection's requests in order), errors closing only this connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{self as km, ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use markers::wire::{DecodeError, FrameError, decode_request, encode_response_frame, read_frame};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::watch;
use tracing::Instrument;

use super::protocol as p;
use super::sasl_auth;
use super::session::Session;
use super::{Context, Dispatched};
use crate::ErrorCode;

/// Read buffer of a connection: larger than every request of the transaction APIs.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// Serves one connection until the peer closes it, bad input arrives, it idles out, or the
/// server shuts down (after the request in progress is answered). `session` is who the
/// listener knows the client as (a client certificate's subject, or `User:ANONYMOUS`); with
/// `sasl`, the client authenticates first ([`sasl_auth::Gate`]) and becomes its SASL user.
pub(crate) async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    ctx: Arc<Context>,
    mut session: Session,
    mut sasl: Option<sasl_auth::Gate>,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let span = tracing::info_span!("connection", %peer);
    async move {
        let (rd, mut wr) = tokio::io::split(stream);
        // Buffered reads: a request's length prefix and body usually arrive in one segment and
        // are then taken with one `recv` instead of two.
        let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, rd);
        let idle = Duration::from_millis(ctx.settings.connections_max_idle_ms);
        // One idle timer per connection, pushed back before each read: tokio moves a timer to
        // a later deadline without touching its timer wheel, where a new timer per read
        // would be inserted and removed again for every request.
        let idle_timer = tokio::time::sleep(idle);
        tokio::pin!(idle_timer);
        loop {
            idle_timer
                .as_mut()
                .reset(tokio::time::Instant::now() + idle);
            let gate = sasl.as_mut().filter(|g| !g.is_done());
            let max_frame = gate
                .as_ref()
                .map_or(ctx.settings.socket_request_max_bytes, |g| g.max_frame());
            let frame = tokio::select! {
                biased;
                _ = shutdown.wait_for(|s| *s) => break,
                r = read_frame(&mut rd, max_frame) => r,
                () = &mut idle_timer => {
                    tracing::debug!("idle connection closed");
                    break;
                }
            };
            let frame = match frame {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(FrameError::TooLarge { len, max }) => {
                    ctx.metrics.connections_rejected.inc();
                    tracing::warn!(
                        len,
                        max,
                        "frame over socket.request.max.bytes; closing connection"
                    );
                    break;
                }
                Err(FrameError::Tls) => {
                    ctx.metrics.connections_rejected.inc();
                    tracing::warn!(
                        "a TLS client on a listener without TLS (its hello where a Kafka frame \
                         starts); closing connection: give the client security.protocol \
                         PLAINTEXT or SASL_PLAINTEXT, or the listener SSL"
                    );
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "connection read failed");
                    break;
                }
            };
            let mut close_after = None;
            let out = if let Some(gate) = gate {
                let record = |api: &'static str, code: ErrorCode| ctx.metrics.record(api, code);
                match gate.on_frame(&record, frame) {
                    sasl_auth::GateOut::Pass(frame) => match dispatch(&ctx, &session, frame).await {
                        Dispatched::Respond(bytes) => Ok(bytes),
                        Dispatched::Silent => {
                            tracing::info!("ApiVersions unanswered; closing connection");
                            break;
                        }
                        Dispatched::Close(reason) => {
                            tracing::info!(%reason, "closing connection before SASL authentication");
                            break;
                        }
                    },
                    sasl_auth::GateOut::Respond(bytes) => Ok(bytes),
                    sasl_auth::GateOut::Authenticated(bytes, principal) => {
                        session.principal = principal;
                        Ok(bytes)
                    }
                    sasl_auth::GateOut::RespondAndClose(bytes, reason) => {
                        close_after = Some(reason);
                        Ok(bytes)
                    }
                    sasl_auth::GateOut::Close(reason) => {
                        tracing::info!(%reason, "closing connection before SASL authentication");
                        break;
                    }
                }
            } else {
                match dispatch(&ctx, &session, frame).await {
                    Dispatched::Respond(bytes) => Ok(bytes),
                    Dispatched::Silent => continue, // Produce with acks=0: no response.
                    Dispatched::Close(reason) => Err(reason),
                }
            };
            match out {
                Ok(bytes) => {
                    // The frame carries its length prefix: one buffer, one `send`. Requests are
                    // served one at a time (as Kafka does), so at most one response of a
                    // connection is ever ready: there is nothing further to coalesce.
                    let write = wr.write_all(&bytes);
                    match tokio::time::timeout(
                        Duration::from_millis(ctx.settings.request_timeout_ms),
                        write,
                    )
                    .await
                    {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "write failed");
                            break;
                        }
                        Err(_) => {
                            tracing::warn!(
                                "client does not read its responses; closing connection"
                            );
                            break;
                        }
                    }
                    if let Some(reason) = close_after {
                        tracing::debug!(%reason, "SASL authentication failed; closing connection");
                        let _ = wr.flush().await;
                        break;
                    }
                }
                Err(reason) => {
                    ctx.metrics.connections_rejected.inc();
                    tracing::warn!(%reason, "bad request; closing connection");
                    break;
                }
            }
        }
    }
    .instrument(span)
    .await;
}

/// What to do with one request frame: see [`Dispatched`]. The time from here until the
/// response is encoded goes into `request_duration_seconds{api}` (frames whose API is not
/// known are not timed).
pub(crate) async fn dispatch(ctx: &Context, session: &Session, frame: Bytes) -> Dispatched {
    let started = Instant::now();
    let (api, out) = dispatch_timed(ctx, session, frame).await;
    if let Some(api) = api {
        ctx.metrics
            .observe_request(p::api_name(api), started.elapsed());
    }
    out
}

/// [`dispatch`] without the timing; also returns the API of the frame when it is known.
async fn dispatch_timed(
    ctx: &Context,
    session: &Session,
    frame: Bytes,
) -> (Option<ApiKey>, Dispatched) {
    let mut timed = None;
    let raw_version = if frame.len() >= 4 {
        i16::from_be_bytes([frame[2], frame[3]])
    } else {
        0
    };
    let out = match decode_request(frame, p::supported) {
        Ok(req) => {
            let api = req.api_key;
            timed = Some(api);
            let version = req.version();
            let correlation_id = req.header.correlation_id;
            // SaslHandshake and SaslAuthenticate reach here only outside an exchange.
            if let Some(body) = sasl_auth::outside_exchange(&req.body) {
                let out = encode_response_frame(api, version, correlation_id, &body)
                    .map_err(|e| format!("encoding {api:?} v{version} response: {e}"));
                return (
                    timed,
                    match out {
                        Ok(b) => Dispatched::Respond(b),
                        Err(r) => Dispatched::Close(r),
                    },
                );
            }
            let Some(body) = handle(ctx, session, version, req.body).await else {
                return (timed, Dispatched::Silent);
            };
            encode_response_frame(api, version, correlation_id, &body)
                .map_err(|e| format!("encoding {api:?} v{version} response: {e}"))
        }
        Err(DecodeError::UnsupportedVersion {
            api_key: ApiKey::ApiVersions,
            version,
            correlation_id,
        }) => {
            // KIP-511: answer in v0 with our ranges so the client can pick a version.
            tracing::debug!(version, "ApiVersions version fallback");
            timed = Some(ApiKey::ApiVersions);
            let body = ResponseKind::ApiVersions(p::api_versions_response(
                ErrorCode::UNSUPPORTED_VERSION,
                ctx.settings.engine.transaction_version,
            ));
            encode_response_frame(ApiKey::ApiVersions, 0, correlation_id, &body)
                .map_err(|e| e.to_string())
        }
        Err(DecodeError::UnsupportedVersion {
            api_key,
            version,
            correlation_id,
        }) => {
            timed = Some(api_key);
            ctx.metrics
                .record(p::api_name(api_key), ErrorCode::UNSUPPORTED_VERSION);
            match p::unsupported_response(api_key, version) {
                Some(body) => encode_response_frame(api_key, version, correlation_id, &body)
                    .map_err(|e| e.to_string()),
                None => Err(format!(
                    "unsupported {api_key:?} v{version} cannot be answered"
                )),
            }
        }
        Err(DecodeError::UnknownApiKey {
            api_key,
            correlation_id,
        }) => {
            let known = ApiKey::try_from(api_key).ok();
            match known.and_then(|k| Some(k).zip(p::unsupported_response(k, raw_version))) {
                Some((k, body)) => {
                    timed = Some(k);
                    ctx.metrics
                        .record(p::api_name(k), ErrorCode::UNSUPPORTED_VERSION);
                    encode_response_frame(k, raw_version, correlation_id, &body)
                        .map_err(|e| e.to_string())
                }
                None => Err(format!("unknown API key {api_key}")),
            }
        }
        Err(e) => Err(e.to_string()),
    };
    let out = match out {
        Ok(bytes) => Dispatched::Respond(bytes),
        Err(reason) => Dispatched::Close(reason),
    };
    (timed, out)
}

/// Answers one decoded request of `session`'s client. `None` = send nothing (Produce with
/// acks=0).
pub(crate) async fn handle(
    ctx: &Context,
    session: &Session,
    version: i16,
    body: RequestKind,
) -> Option<ResponseKind> {
    let c = &ctx.coordinator;
    let authz = |api: &'static str| {
        let authorizer = ctx
            .security
            .authorizer()
            .map(|a| a as Arc<dyn security::acl::Authorizer>);
        super::authz::Authz::new(authorizer, session, &ctx.denials, api)
    };
    // A daemon that cannot know its membership lease still holds (stopped or cut off from etcd
    // for most of the TTL) answers nothing from its state: another daemon may own it by now.
    if !ctx.serving()
        && let Some(refused) = not_coordinator(version, &body)
    {
        return Some(refused);
    }
    Some(match body {
        RequestKind::ApiVersions(_) => {
            ctx.metrics.record("ApiVersions", ErrorCode::NONE);
            ResponseKind::ApiVersions(p::api_versions_response(
                ErrorCode::NONE,
                ctx.settings.engine.transaction_version,
            ))
        }
        RequestKind::Metadata(r) => {
            ctx.metrics.record("Metadata", ErrorCode::NONE);
            ResponseKind::Metadata(metadata(ctx, version, &r).await)
        }
        RequestKind::FindCoordinator(r) => ResponseKind::FindCoordinator(
            find_coordinator(ctx, &authz("FindCoordinator"), version, &r).await,
        ),
        body @ (RequestKind::InitProducerId(_)
        | RequestKind::AddPartitionsToTxn(_)
        | RequestKind::AddOffsetsToTxn(_)
        | RequestKind::EndTxn(_)
        | RequestKind::DescribeTransactions(_)
        | RequestKind::ListTransactions(_)) => {
            match super::txn_apis::handle(c, &authz, version, body).await {
                Ok(resp) => resp,
                Err(other) => {
                    tracing::error!(request = ?other, "not a transaction API");
                    return None;
                }
            }
        }
        RequestKind::CreateAcls(r) => ResponseKind::CreateAcls(
            super::security_apis::create_acls(&ctx.security, &ctx.metrics, &authz("CreateAcls"), r)
                .await,
        ),
        RequestKind::DescribeAcls(r) => {
            ResponseKind::DescribeAcls(super::security_apis::describe_acls(
                &ctx.security,
                &ctx.metrics,
                &authz("DescribeAcls"),
                &r,
            ))
        }
        RequestKind::DeleteAcls(r) => ResponseKind::DeleteAcls(
            super::security_apis::delete_acls(&ctx.security, &ctx.metrics, &authz("DeleteAcls"), r)
                .await,
        ),
        RequestKind::DescribeClientQuotas(r) => {
            let resp =
                super::security_apis::describe_client_quotas(&authz("DescribeClientQuotas"), &r);
            if resp.error_code != 0 {
                ctx.metrics
                    .record("DescribeClientQuotas", ErrorCode(resp.error_code));
            }
            ResponseKind::DescribeClientQuotas(resp)
        }
        RequestKind::DescribeUserScramCredentials(r) => {
            ResponseKind::DescribeUserScramCredentials(super::security_apis::describe_scram(
                &ctx.security,
                &ctx.metrics,
                &authz("DescribeUserScramCredentials"),
                &r,
            ))
        }
        RequestKind::AlterUserScramCredentials(r) => ResponseKind::AlterUserScramCredentials(
            super::security_apis::alter_scram(
                &ctx.security,
                &ctx.metrics,
                &authz("AlterUserScramCredentials"),
                r,
            )
            .await,
        ),
        RequestKind::Produce(r) => {
            ctx.metrics
                .record("Produce", ErrorCode::NOT_LEADER_OR_FOLLOWER);
            if r.acks == 0 {
                return None;
            }
            p::produce_response(&r)
        }
        RequestKind::Fetch(r) => {
            ctx.metrics
                .record("Fetch", ErrorCode::NOT_LEADER_OR_FOLLOWER);
            p::fetch_response(&r)
        }
        other => {
            // decode_request only lets the advertised APIs through; anything else is a bug.
            tracing::error!(request = ?other, "request of an unadvertised API reached the handler");
            return None;
        }
    })
}

/// NOT_COORDINATOR for a request of the transaction APIs (`None` for the others).
fn not_coordinator(version: i16, body: &RequestKind) -> Option<ResponseKind> {
    let e = ErrorCode::NOT_COORDINATOR;
    Some(match body {
        RequestKind::InitProducerId(_) => {
            p::init_producer_id_response(version, crate::InitProducerIdResponse::error(e))
        }
        RequestKind::AddPartitionsToTxn(r) => p::add_partitions_response(
            version,
            &crate::AddPartitionsToTxnResponse::all(&p::add_partitions(version, r), e),
        ),
        RequestKind::AddOffsetsToTxn(_) => p::add_offsets_response(e),
        RequestKind::EndTxn(_) => p::end_txn_response(version, crate::EndTxnResponse::error(e)),
        RequestKind::DescribeTransactions(r) => p::describe_response(
            &p::describe(r)
                .transactional_ids
                .iter()
                .map(|id| crate::DescribedTxn::error(id, e))
                .collect::<Vec<_>>(),
        ),
        // Owning nothing, it has nothing to list.
        RequestKind::ListTransactions(r) => p::list_response_owning_nothing(version, r),
        _ => return None,
    })
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn this_broker(ctx: &Context) -> km::metadata_response::MetadataResponseBroker {
    km::metadata_response::MetadataResponseBroker::default()
        .with_node_id(km::BrokerId(ctx.node_id))
        .with_host(s(&ctx.advertised_host))
        .with_port(i32::from(ctx.advertised_port))
}

/// Metadata: the brokers' answer plus this node; without brokers, this node alone.
async fn metadata(ctx: &Context, version: i16, r: &km::MetadataRequest) -> km::MetadataResponse {
    let forwarded = if ctx.brokers.is_empty() {
        None
    } else {
        match ctx.brokers.metadata(r, version).await {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(error = %e, "metadata from the brokers unavailable");
                None
            }
        }
    };
    let mut resp = match forwarded {
        Some(m) => m,
        None => {
            // Topics asked for by name are unknown (no brokers) or not available (brokers down).
            let err = if ctx.brokers.is_empty() { 3 } else { 5 };
            let topics = r
                .topics
                .iter()
                .flatten()
                .filter_map(|t| t.name.clone())
                .map(|n| {
                    km::metadata_response::MetadataResponseTopic::default()
                        .with_error_code(err)
                        .with_name(Some(n))
                })
                .collect();
            let mut m = km::MetadataResponse::default().with_topics(topics);
            if version >= 1 {
                m.controller_id = km::BrokerId(ctx.node_id);
            }
            if version >= 2 {
                m.cluster_id = Some(s("txn-coordinator"));
            }
            m
        }
    };
    #[cfg(feature = "etcd")]
    if let Some(m) = &ctx.membership {
        for member in m.members() {
            if member.node_id != ctx.node_id
                && !resp.brokers.iter().any(|b| b.node_id.0 == member.node_id)
            {
                let (host, port) = member.address_for(&ctx.listener);
                resp.brokers.push(
                    km::metadata_response::MetadataResponseBroker::default()
                        .with_node_id(km::BrokerId(member.node_id))
                        .with_host(s(&host))
                        .with_port(i32::from(port)),
                );
            }
        }
    }
    if !resp.brokers.iter().any(|b| b.node_id.0 == ctx.node_id) {
        resp.brokers.push(this_broker(ctx));
    } else if !resp.brokers.iter().any(|b| {
        b.node_id.0 == ctx.node_id
            && b.host.as_str() == ctx.advertised_host
            && b.port == i32::from(ctx.advertised_port)
    }) {
        tracing::warn!(
            node_id = ctx.node_id,
            "a broker uses this node's --node-id; clients cannot tell them apart"
        );
    }
    if version >= 11 {
        resp.cluster_authorized_operations = i32::MIN;
    }
    resp
}

/// FindCoordinator: TRANSACTION keys -> this node; GROUP keys -> the brokers' answer.
/// FindCoordinator(TRANSACTION): this node, or with several daemons on etcd the owner of the
/// id's log partition (COORDINATOR_NOT_AVAILABLE while no live member owns it, or while its
/// owner does not answer: `peers`).
fn transaction_coordinator(ctx: &Context, key: &str) -> (ErrorCode, i32, String, i32) {
    let me = (
        ErrorCode::NONE,
        ctx.node_id,
        ctx.advertised_host.clone(),
        i32::from(ctx.advertised_port),
    );
    #[cfg(feature = "etcd")]
    if let Some(m) = &ctx.membership {
        let Ok(id) = txn_log::TransactionalId::new(key) else {
            return me;
        };
        let partition = ctx.coordinator.config().partition_for(&id);
        return match m.answering_owner(partition) {
            Some(o) => {
                let (host, port) = o.address_for(&ctx.listener);
                (ErrorCode::NONE, o.node_id, host, i32::from(port))
            }
            None => (ErrorCode::COORDINATOR_NOT_AVAILABLE, -1, String::new(), -1),
        };
    }
    let _ = key;
    me
}

async fn find_coordinator(
    ctx: &Context,
    authz: &super::authz::Authz<'_>,
    version: i16,
    r: &km::FindCoordinatorRequest,
) -> km::FindCoordinatorResponse {
    let keys: Vec<String> = if version >= 4 {
        r.coordinator_keys.iter().map(|k| k.to_string()).collect()
    } else {
        vec![r.key.to_string()]
    };
    let mut answers = Vec::with_capacity(keys.len());
    for key in &keys {
        let denied = authz.find_coordinator_key(r.key_type, key);
        let a = match r.key_type {
            _ if denied.is_some() => (denied.unwrap_or(ErrorCode::NONE), -1, String::new(), -1),
            1 => transaction_coordinator(ctx, key),
            0 => match ctx.brokers.find_group_coordinator(key).await {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!(error = %e, group = %key, "group coordinator lookup failed");
                    (ErrorCode::COORDINATOR_NOT_AVAILABLE, -1, String::new(), -1)
                }
            },
            _ => (ErrorCode::INVALID_REQUEST, -1, String::new(), -1),
        };
        ctx.metrics.record("FindCoordinator", a.0);
        answers.push((key.clone(), a));
    }
    let mut out = km::FindCoordinatorResponse::default();
    if version >= 4 {
        out.coordinators = answers
            .into_iter()
            .map(|(key, (e, node, host, port))| {
                km::find_coordinator_response::Coordinator::default()
                    .with_key(s(&key))
                    .with_node_id(km::BrokerId(node))
                    .with_host(s(&host))
                    .with_port(port)
                    .with_error_code(e.0)
                    .with_error_message(e.name().filter(|_| !e.is_none()).map(s))
            })
            .collect();
    } else if let Some((_, (e, node, host, port))) = answers.into_iter().next() {
        out.error_code = e.0;
        out.node_id = km::BrokerId(node);
        out.host = s(&host);
        out.port = port;
        if version >= 1 && !e.is_none() {
            out.error_message = e.name().map(s);
        }
    }
    out
}
